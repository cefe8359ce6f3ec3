"""The documentation's examples run as written: the README's quickstarts and "Your own survey,
step by step" (in the README and on the survey-data page), the configuration reference's
example (a valid configuration), the command list's ``report`` line, and the ``make demo``
sample on the getting-started page (made by a real run)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streamanon.service.config import parse_config
from tests.docs_pages import block, commands, page, section
from tests.support.children import Lines

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
WALKTHROUGH = "Your own survey, step by step"


def test_configuration_reference_parses():
    reference = block(page("guide/configuration.md"), "toml")
    assert "[[surveys]]" in reference
    config = parse_config(tomllib.loads(reference),
                          {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32})
    survey = config.surveys[0]
    assert survey.deadline == 3600 and survey.k == 10
    assert set(survey.fields) >= {"respondent_id", "age", "income", "satisfaction"}


@pytest.mark.parametrize("where", ["README.md", "guide/survey-data.md"])
def test_the_own_survey_walkthrough_runs_as_written(tmp_path, where, subprocesses):
    """The commands of "Your own survey, step by step", as written there (run as
    tests/test_commands.py runs the other sections'): on ``survey.csv``, the example survey the
    package ships, with the section's schema saved as ``schema.toml``. The release is
    k-anonymous on the schema's key, and the report shows the record linkage anonymize
    measured, saying where it came from."""
    walkthrough = section(page(where), WALKTHROUGH)
    (tmp_path / "schema.toml").write_text(block(walkthrough, "toml"), encoding="utf-8")
    shutil.copyfile(REPO / "streamanon" / "data" / "example_survey.csv", tmp_path / "survey.csv")
    lines = [line.split() for line in commands(block(walkthrough, "sh"))]
    assert [c[:2] for c in lines] == [["streamanon", "anonymize"], ["streamanon", "verify"],
                                      ["streamanon", "report"]]
    assert "--qi" not in lines[1]  # the key comes from the schema
    outputs = []
    for words in lines:
        result = subprocess.run([sys.executable, "-m", "streamanon", *words[1:]], cwd=tmp_path,
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, "STREAMANON_DATA_DIR": str(tmp_path)})
        assert result.returncode == 0, result.stdout + result.stderr
        outputs.append(result.stdout + result.stderr)
    k = lines[1][lines[1].index("--k") + 1]
    assert f"{k}-anonymous (2000 records" in outputs[1]
    assert "measured by anonymize before shuffling, from release.report.json" in outputs[2]
    assert (tmp_path / "release.report.html").stat().st_size > 10_000


def test_report_is_in_the_command_list_with_the_command_the_walkthrough_runs():
    report = section(page("guide/cli.md"), "`streamanon report`")
    [shown] = commands(block(report, "sh"))
    assert shown.split()[:2] == ["streamanon", "report"]
    for where in ("README.md", "guide/survey-data.md"):
        assert shown in commands(block(section(page(where), WALKTHROUGH), "sh"))


def test_the_demo_sample_is_the_one_a_real_run_made():
    """The ``make demo`` block of the getting-started page is made by
    ``simulations/readme_demo.py`` from the summary of a real run kept in
    docs/demo-sample.json, never edited by hand: remade from that summary it is the same, and
    what it claims holds in the summary."""
    import json

    from simulations.readme_demo import END, PAGE, SAMPLE, START
    from simulations.readme_demo import block as sample_block

    assert PAGE == REPO / "docs" / "getting-started.md"
    sample = json.loads(SAMPLE.read_text())
    text = PAGE.read_text()
    shown = START + text.split(START, 1)[1].split(END, 1)[0] + END
    assert shown == sample_block(sample)
    provenance = sample["provenance"]
    assert provenance["command"] == "make demo" and provenance["commit"] != "unknown"
    assert f"commit {provenance['commit']}" in shown and provenance["machine"] in shown
    summary = sample["summary"]
    release = summary["release"]
    assert release["mode"] == "two-stage" and release["nu"] > 0
    sooner = summary["one_shot_release_seconds"] / release["close_to_release_seconds"]
    assert f"{sooner:.1f}x sooner" in shown


def _run(words: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    # the installed command, as a user runs it (``python -m`` would import a ``streamanon``
    # folder in ``cwd``, which the first quickstart has)
    argv = ([sys.executable, *words[1:]] if words[0] in ("python", "python3")
            else [str(Path(sys.executable).with_name("streamanon")), *words[1:]])
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "STREAMANON_DATA_DIR": str(cwd), **(env or {})})
    assert result.returncode == 0, " ".join(words) + "\n" + result.stdout + result.stderr
    return result.stdout + result.stderr


def test_quickstart_1_a_csv_file_runs_as_written(tmp_path, subprocesses):
    """The README's first quickstart, in a folder that holds the example survey where the
    repository does: the release is 10-anonymous on the key it names."""
    data = tmp_path / "streamanon" / "data"
    data.mkdir(parents=True)
    shutil.copyfile(REPO / "streamanon" / "data" / "example_survey.csv",
                    data / "example_survey.csv")
    lines = commands(block(section(page("README.md"), "Quickstart 1: a CSV file"), "sh"))
    assert [line.split()[:2] for line in lines] == [["streamanon", "anonymize"],
                                                    ["streamanon", "verify"]]
    outputs = [_run(line.split(), tmp_path) for line in lines]
    assert "wrote release.csv: 2000 records" in outputs[0]
    assert "10-anonymous (2000 records" in outputs[1]


def test_quickstart_3_the_service_starts_as_written(tmp_path, subprocesses):
    """The README's third quickstart: its configuration, the two secrets made as shown, and
    ``streamanon serve --config streamanon.toml --embedded-broker`` serve the survey with the
    embedded broker (the HTTP address moved to a free port, as STREAMANON_HTTP_BIND allows);
    /api/status shows the survey open; ``streamanon close`` as the README names it closes it
    through the running service."""
    import json
    import signal
    import urllib.request

    from streamanon.service.broker import free_port

    quickstart = section(page("README.md"), "Quickstart 3: the service on the embedded broker")
    (tmp_path / "streamanon.toml").write_text(block(quickstart, "toml"), encoding="utf-8")
    parse_config(tomllib.loads(block(quickstart, "toml")),
                 {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32})
    lines = commands(block(quickstart, "sh"))
    env = {**os.environ, "STREAMANON_DATA_DIR": str(tmp_path)}
    for line in lines[:2]:  # export NAME=$(python3 -c '...'): run the Python part as shown
        name, _, value = line.removeprefix("export ").partition("=")
        code = re.fullmatch(r"\$\(python3 -c '(.*)'\)", value).group(1)
        env[name] = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                   text=True, check=True).stdout.strip()
    assert len(env["STREAMANON_HMAC_KEY"]) == 64 and len(env["STREAMANON_HTTP_TOKEN"]) == 64
    assert lines[2] == "streamanon serve --config streamanon.toml --embedded-broker"
    port = free_port()
    env["STREAMANON_HTTP_BIND"] = f"127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "streamanon", *lines[2].split()[1:]],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        lines = Lines(proc)
        assert lines.next().startswith("embedded broker at")
        while True:  # the cost models are calibrated first (seconds)
            line = lines.next()
            assert line, "the service stopped"
            if line.startswith("serving 1 survey(s); HTTP on"):
                break
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=10) as r:
            status = json.load(r)
        assert "quickstart" in json.dumps(status) and "OPEN" in json.dumps(status)
        close = re.search(r"`(streamanon close quickstart --config streamanon.toml)`",
                          quickstart).group(1)
        result = subprocess.run([sys.executable, "-m", "streamanon", *close.split()[1:]],
                                cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "survey quickstart: closing" in result.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
