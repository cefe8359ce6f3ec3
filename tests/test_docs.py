"""The documentation holds: every command a page shows is run by a test or checked against the
command line it names, the site builds with ``mkdocs build --strict``, the README stays short,
and its picture is the one ``simulations/plot_readme_schedule.py`` draws.

A command is a line of a ```sh, ```console or ```bash block of README.md or of a page under
docs/ that starts with ``streamanon``, ``make``, ``python`` or ``.venv/bin/``. Each is either

- **run by a test** (``RUN_BY``: the page, the command's pattern, the test that runs it and a
  string of that test's source that shows it reads the page), or
- **checked here**: ``streamanon ...`` lines are parsed by the real parser
  (``streamanon.cli.build_parser``), so a renamed flag or subcommand fails; ``make TARGET``
  names a target of the Makefile; a script of ``simulations/`` (``python -m simulations.NAME``,
  never a file path: the folder is not installed) is asked for ``--help`` and every option the
  line gives must be in it.

Anything else fails: a page may not show a command nobody checks.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_pages import DOCS, REPO, blocks, commands

STARTS = ("streamanon ", "make ", "python ", "python3 ", ".venv/bin/")

#: (page, pattern of the command, test that runs it, a string of the test file showing it
#: reads that page or runs that command)
RUN_BY = [
    ("guide/survey-data.md", r"streamanon (anonymize .*--out release\.(sav|dta) |verify "
     r"release\.(sav|dta) )", "tests/cli/test_statistician_formats.py"
     "::test_the_documented_commands_run", '"guide/survey-data.md"'),
    ("README.md", r"make demo", "tests/service/pipeline/test_demo_and_control.py"
     "::test_make_demo_runs_the_scheduled_pipeline", '"demo"'),
    ("README.md", r"make test", "tests/test_commands.py"
     "::test_make_test_runs_the_linter_and_the_whole_suite", '"test"'),
    ("README.md", r"streamanon (anonymize|verify) (streamanon/data/example_survey\.csv|release\.csv"
     r" --k 10 --qi)", "tests/test_readme.py::test_quickstart_1_a_csv_file_runs_as_written",
     '"Quickstart 1: a CSV file"'),
    ("README.md", r"streamanon (anonymize|verify|report) survey\.csv|streamanon verify release\.csv"
     r" --schema", "tests/test_readme.py::test_the_own_survey_walkthrough_runs_as_written",
     '"README.md"'),
    ("README.md", r"streamanon serve --config streamanon\.toml --embedded-broker",
     "tests/test_readme.py::test_quickstart_3_the_service_starts_as_written",
     '"Quickstart 3: the service on the embedded broker"'),
    ("guide/survey-data.md", r"streamanon (anonymize|verify|report) .*--schema schema\.toml --k 5"
     r"( --l 2)?( --out release\.csv --seed 1)?$",
     "tests/test_readme.py::test_the_own_survey_walkthrough_runs_as_written",
     '"guide/survey-data.md"'),
    ("guide/survey-data.md", r"python -m simulations\.survey_data|streamanon (anonymize|verify) "
     r"(survey\.csv|release\.parquet)", "tests/test_commands.py"
     "::test_the_survey_data_commands_run", '"guide/survey-data.md"'),
    ("guide/survey-data.md", r"streamanon schema from-xlsform plots\.xlsx|streamanon "
     r"(anonymize|verify) plots\.", "tests/cli/test_schema.py"
     "::test_the_xlsform_commands_release_a_real_form_k_anonymously", '"From an XLSForm"'),
    ("guide/privacy.md", r".*", "tests/test_commands.py::test_the_privacy_commands_run",
     '"guide/privacy.md"'),
    ("guide/differential-privacy.md", r".*", "tests/cli/test_anonymize_dp.py"
     "::test_the_documented_commands_run", '"guide/differential-privacy.md"'),
    ("benchmarks/mdav.md", r"make bench BENCH_ARGS=", "tests/test_commands.py"
     "::test_make_bench_runs_the_benchmark", '"bench"'),
    ("benchmarks/service.md", r"python -m simulations\.bench_service", "tests/test_commands.py"
     "::test_the_service_benchmark_runs", "simulations.bench_service"),
    ("guide/reliability.md", r"python -m simulations\.faults", "tests/simulations/test_faults.py"
     "::test_the_documented_fault_suite_runs", '"guide/reliability.md"'),
    ("guide/reliability.md", r"python -m simulations\.cluster_faults --repeat 1 ",
     "tests/simulations/test_cluster_faults.py::test_the_documented_cluster_faults_run",
     '"guide/reliability.md"'),
    ("guide/scaling.md", r"streamanon anonymize big\.parquet .*--cluster tcp://",
     "tests/test_cluster.py::test_the_readme_worker_commands_serve_a_cli_run",
     "dask worker"),
]


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def _name(path: Path) -> str:
    return "README.md" if path == REPO / "README.md" else path.relative_to(DOCS).as_posix()


def shown_commands() -> list[tuple[str, str]]:
    """Every (page, command line) the documentation shows."""
    found = []
    for path in _pages():
        for shell in blocks(path.read_text(encoding="utf-8"), "sh", "console", "bash"):
            for line in commands(shell):
                if line.startswith(STARTS):
                    found.append((_name(path), line))
    return found


def _run_by(where: str, command: str) -> str | None:
    for page_name, pattern, node, _ in RUN_BY:
        if page_name == where and re.match(pattern, command):
            return node
    return None


def test_the_tests_named_as_running_a_command_exist_and_read_its_page():
    for _, _, node, evidence in RUN_BY:
        file, _, name = node.partition("::")
        source = (REPO / file).read_text()
        functions = {f.name for f in ast.walk(ast.parse(source))
                     if isinstance(f, ast.FunctionDef)}
        assert name in functions, f"{node}: no such test"
        assert evidence in source, f"{node}: does not read {evidence}"


def test_the_documentation_shows_commands_and_the_registry_matches_some():
    shown = shown_commands()
    assert len(shown) > 40
    unused = [(page_name, pattern) for page_name, pattern, _, _ in RUN_BY
              if not any(w == page_name and re.match(pattern, c) for w, c in shown)]
    assert not unused, f"RUN_BY entries that match no command: {unused}"


# --- checked here -------------------------------------------------------------------------


def _argv(command: str) -> list[str]:
    """The words of a shown command, placeholders made concrete: ``[--opt X]`` loses its
    brackets, a ``...`` after an option becomes a value, any other ``...`` is left out."""
    words = shlex.split(command.replace("[", "").replace("]", ""))
    out = []
    for word in words:
        if word == "...":
            if out and out[-1].startswith("-"):
                out.append("x")
            continue
        out.append(word)
    return out


def _streamanon_words(words: list[str]) -> list[str] | None:
    if words[0] in ("streamanon", ".venv/bin/streamanon"):
        return words[1:]
    if words[:3] in (["python", "-m", "streamanon"], [".venv/bin/python", "-m", "streamanon"]):
        return words[3:]
    return None


def _script(words: list[str]) -> str | None:
    """The simulations module a ``python -m`` line runs (``simulations.NAME``). A script is not
    run as a file: ``simulations`` is not installed, so only the repository root (the current
    folder of ``python -m``) puts it on the import path."""
    if words[0] not in ("python", "python3", ".venv/bin/python"):
        return None
    if words[1:3] and words[1] == "-m" and words[2].startswith("simulations."):
        return words[2]
    if len(words) > 1 and words[1].startswith("simulations/"):
        raise AssertionError(f"`{' '.join(words)}`: run as `python -m simulations.NAME` from the "
                             "repository root (simulations is not installed)")
    return None


def _path(module: str) -> Path:
    return REPO / (module.replace(".", "/") + ".py")


@functools.cache
def _help(module: str) -> str:
    source = _path(module).read_text()
    assert "ArgumentParser" in source, f"{module}: has no --help (argparse) to check against"
    result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{module} --help: {result.stderr[-2000:]}"
    return result.stdout


def _check(where: str, command: str) -> None:
    words = _argv(command)
    sub = _streamanon_words(words)
    if sub is not None:
        from streamanon.cli import build_parser

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                build_parser().parse_args(sub)
            except SystemExit as exc:
                assert exc.code == 0, f"{where}: `{command}`: {err.getvalue().strip()}"
        return
    if words[0] == "make":
        targets = set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), re.M))
        named = [w for w in words[1:] if "=" not in w]
        assert named and set(named) <= targets, f"{where}: `{command}`: not a Makefile target"
        return
    try:
        script = _script(words)
    except AssertionError as exc:
        raise AssertionError(f"{where}: {exc}") from None
    if script is not None:
        assert _path(script).is_file(), f"{where}: `{command}`: no {_path(script)}"
        text = _help(script)
        for word in words[3:]:
            if word.startswith("--"):
                option = word.split("=", 1)[0]
                assert option in text, f"{where}: `{command}`: {script} has no {option}"
        return
    if words[:3] == [".venv/bin/mkdocs", "build", "--strict"]:
        return  # test_the_site_builds_strict runs it
    raise AssertionError(f"{where}: `{command}`: no test runs it and nothing here can check it")


def test_every_shown_command_is_run_by_a_test_or_checked(subprocesses):
    unchecked = []
    for where, command in shown_commands():
        if _run_by(where, command):
            continue
        try:
            _check(where, command)
        except AssertionError as exc:
            unchecked.append(str(exc).splitlines()[0])
    assert not unchecked, "\n".join(unchecked)


def test_every_shown_streamanon_line_parses():
    """The fast part of the check above (no child process): every ``streamanon`` line the
    documentation shows, and every ``make`` line, as ``make check`` runs it."""
    for where, command in shown_commands():
        words = _argv(command)
        if _streamanon_words(words) is not None or words[0] == "make":
            _check(where, command)


def test_a_renamed_flag_fails_the_check():
    with pytest.raises(AssertionError, match="unrecognized arguments: --qis"):
        _check("a page", "streamanon anonymize survey.csv --k 10 --qis age --out r.csv")
    with pytest.raises(AssertionError, match="not a Makefile target"):
        _check("a page", "make tests")
    with pytest.raises(AssertionError, match=r"run as `python -m simulations\.NAME`"):
        _check("a page", "python simulations/bench_mdav.py --repeat 1")
    _check("a page", "streamanon calibrate --engine mdav --m 15 --k 10 [--budget 5s]")


# --- the site, the README, the picture --------------------------------------------------------


def test_the_site_builds_strict(tmp_path, subprocesses):
    """``mkdocs build --strict``: no broken link, no page outside the navigation, no
    docstring the API reference cannot render."""
    mkdocs = Path(sys.executable).with_name("mkdocs")
    result = subprocess.run([str(mkdocs), "build", "--strict", "-d", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "streamanon" / "index.html").is_file()


def test_the_readme_is_at_most_300_lines_and_its_links_lead_somewhere():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert link.startswith("https://") or (REPO / link).exists(), link
    assert "[Getting started](docs/getting-started.md)" in text  # the way into the site


def test_the_readme_picture_is_the_one_the_script_draws(tmp_path):
    """``python -m simulations.plot_readme_schedule`` draws docs/img/schedule.svg from the
    planner, byte for byte, and the README and the home page show it."""
    from simulations.plot_readme_schedule import OUT, draw

    assert "](docs/img/schedule.svg)" in (REPO / "README.md").read_text()
    assert "](img/schedule.svg)" in (DOCS / "index.md").read_text()
    assert draw(tmp_path / "schedule.svg").read_bytes() == OUT.read_bytes()
