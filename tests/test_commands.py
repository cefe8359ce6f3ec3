"""The README's two commands and the Makefile's other targets, run as the Makefile runs them,
and the commands of the survey-data and privacy pages as written there:
a renamed flag or a missing target fails here, not in front of a new user."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

from tests.conftest import REPO
from tests.docs_pages import DOCS, block, blocks, commands, page, section

README = page("README.md")
MAKEFILE = (REPO / "Makefile").read_text()


def _make(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO), *args],
                          capture_output=True, text=True, timeout=timeout)


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second():
    assert commands(block(README, "sh")) == ["make demo", "make test"]
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_every_make_target_the_readme_names_exists():
    """In the README and on every page of the documentation."""
    targets = set(re.findall(r"^([a-z][a-z-]*):", MAKEFILE, flags=re.M))
    named = set(re.findall(r"`make ([a-z][a-z-]*)", README))
    assert {"demo", "test"} <= named
    for doc in DOCS.rglob("*.md"):
        text = doc.read_text()
        named |= set(re.findall(r"`make ([a-z][a-z-]*)", text))
        named |= {line.split()[1] for shell in blocks(text, "sh", "console", "bash")
                  for line in commands(shell) if line.startswith("make ")}
    assert named <= targets, named - targets


def _pytest_runs(target: str) -> list[list[str]]:
    """What ``make TARGET`` passes to pytest, each run in its order, after checking that it
    runs the linter first."""
    dry = _make("-n", target, "STAMP=")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert any(line.endswith("ruff check streamanon scheduler tests simulations")
               for line in lines)
    return [shlex.split(line.split("python -m pytest")[1]) for line in lines
            if "python -m pytest" in line and not line.lstrip().startswith("@echo")
            and not line.lstrip().startswith("echo")]


def test_make_test_runs_the_linter_and_the_whole_suite(subprocesses):
    """Every test: those that measure a speed claim alone, after the others (a claim measured
    beside other tests on two cores measures them too)."""
    workers = 2 * len(os.sched_getaffinity(0))  # the usable cores, whatever OMP_NUM_THREADS says
    assert _pytest_runs("test") == [["-n", str(workers), "--dist", "worksteal",
                                     "-m", "not measuring"], ["-m", "measuring"]]


def test_make_check_leaves_out_exactly_the_marked_tests(subprocesses):
    from tests.conftest import SLOW_MARKERS

    [arguments] = _pytest_runs("check")
    assert arguments[:4] == ["-n", "auto", "--dist", "worksteal"]
    assert arguments[4:6] == ["-m", f"not ({' or '.join(SLOW_MARKERS)})"]


def test_make_bench_runs_the_benchmark(subprocesses, tmp_path):
    out = tmp_path / "bench.json"
    result = _make("bench", f"BENCH_OUT={out}",
                   "BENCH_ARGS=--sizes 2000,3000 --ks 5 --repeat 1 --baseline-max-n 2000")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["n"], r["k"]) for r in rows] == [(2000, 5), (3000, 5)]
    assert rows[0]["same_partition"] is True  # the fast MDAV against the NumPy baseline
    assert "| 2,000 | 5 |" in result.stdout and f"wrote {out}" in result.stdout


def test_the_service_benchmark_runs(subprocesses, tmp_path):
    """``python -m simulations.bench_service`` (docs/benchmarks/service.md), on a small load:
    the three modes side by side (two-stage, the same with a CPU job beside it, one-shot), every
    step of report.json in the table, the base release spliced."""
    out = tmp_path / "bench_service.json"
    result = subprocess.run(
        [sys.executable, "-m", "simulations.bench_service", "--sizes", "4000", "--busy",
         "--out", str(out), "--log", str(tmp_path / "service.log")], cwd=REPO,
        capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [run] = json.loads(out.read_text())
    log = (tmp_path / "service.log").read_text()  # where the compute step's time went
    assert re.search(r"the partition back after \d+\.\d\d s \(its stage \d+\.\d\d s\), the "
                     r"records prepared beside it after \d+\.\d\d s", log), log[-3000:]
    two, one, busy = run["twostage"], run["oneshot"], run["busy"]
    assert two["n"] == one["n"] == busy["n"] == run["n"] == 4000
    assert two["mode"] == busy["mode"] == "two-stage" and one["mode"] == "one-shot"
    assert two["spliced"] is busy["spliced"] is True and one["spliced"] is False
    assert busy["n_increment"] == two["n_increment"]  # the same release, made again
    assert "| 4,000: two-stage, CPU job beside |" in result.stdout
    assert "times the quiet release; target <= 2 x the quiet one" in result.stdout
    assert 0 < two["n_increment"] < 4000 and one["n_increment"] == 0
    assert two["n_increment"] == max(round(run["nu"] * 4000), 1)  # the planned nu
    for step in ("drain", "load", "compute", "gate_and_table", "files", "publish"):
        assert step in two["close_steps_seconds"] and step in one["close_steps_seconds"]
        assert f"| {step.replace('_', ' ')} |" in result.stdout
    assert "| **close to release** |" in result.stdout and f"wrote {out}" in result.stdout


# The pages run `python -m simulations.NAME` from the repository root (simulations/ is not
# installed); the tests run in a temporary directory, so they put the root on the path.
FROM_THE_ROOT = {**os.environ, "PYTHONPATH": str(REPO)}


def test_the_survey_data_commands_run(tmp_path, subprocesses):
    """The three commands of the "Survey data" section (docs/guide/survey-data.md), as
    written there."""
    shown = section(page("guide/survey-data.md"),
                    "Survey data: categories, ordinals, missing answers, strata and weights")
    lines = [line.split() for line in commands(block(shown, "sh"))]
    assert [c[:2] for c in lines] == [["python", "-m"], ["streamanon", "anonymize"],
                                         ["streamanon", "verify"]]
    outputs = []
    for words in lines:
        argv = ([sys.executable, *words[1:]] if words[0] == "python"
                else [sys.executable, "-m", "streamanon", *words[1:]])
        result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                                env=FROM_THE_ROOT)
        assert result.returncode == 0, result.stdout + result.stderr
        outputs.append(result.stdout + result.stderr)
    assert "3000 records" in outputs[1]
    assert "5-anonymous" in outputs[2] and "0.0 % after" in outputs[2]


def test_the_privacy_commands_run(tmp_path, subprocesses):
    """The commands of docs/guide/privacy.md, as written there:
    the release they make is checked 0.2-close and 2-diverse by ``verify``, and the report
    page is written."""
    lines = [line.split() for line in commands(block(page("guide/privacy.md"), "sh"))]
    assert [c[:2] for c in lines] == [["python", "-m"], ["streamanon", "anonymize"],
                                         ["streamanon", "verify"], ["streamanon", "report"]]
    outputs = []
    for words in lines:
        argv = ([sys.executable, *words[1:]] if words[0] == "python"
                else [sys.executable, "-m", "streamanon", *words[1:]])
        result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                                env={**FROM_THE_ROOT, "STREAMANON_DATA_DIR": str(tmp_path)})
        assert result.returncode == 0, result.stdout + result.stderr
        outputs.append(result.stdout + result.stderr)
    assert "q1: l = " in outputs[1] and "5-anonymous" in outputs[2]
    assert (tmp_path / "release.report.html").stat().st_size > 10_000
    # anonymeter's attacks, 600 of the 3,000 records held out (the page's "Attacks" section)
    assert "attacks (anonymeter): singling out " in outputs[3], outputs[3]
    assert "20 % of 3,000 records held out" in outputs[3]
