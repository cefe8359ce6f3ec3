"""Progress of long work when the output is not a terminal: a line every interval with the
phase, the records done of the total and the rate (streamanon.cli._progress)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from streamanon.cli._progress import shown
from streamanon.progress import Progress

LINE = re.compile(r"^streamanon: \d+ s: (?P<phase>[^:]+)(: (?P<done>[\d,]+) of "
                  r"(?P<total>[\d,]+) records \((?P<rate>[\d,]+)/s\))?$")
#: The line after a run that compiled numba kernels (streamanon.cli._compiling).
COMPILED = re.compile(r"^streamanon: compiled \d+ numba kernels? in \d+ s, once: later runs "
                      r"load them cached$")


def progress_lines(text: str) -> list[str]:
    """The progress lines of a command's standard error (the compile summary aside)."""
    return [x for x in text.splitlines() if x.startswith("streamanon: ")
            and not COMPILED.match(x)]


def test_lines_follow_the_phases_into_a_file(monkeypatch):
    monkeypatch.setenv("STREAMANON_PROGRESS_SECONDS", "0.05")
    out = io.StringIO()  # not a terminal
    with shown(Progress(), "work", stream=out) as progress:
        progress.enter("read the input")
        time.sleep(0.3)
        progress.enter("engine mdav")
        progress.start(1_000)
        progress.counter[0] = 400
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert lines and all(LINE.match(x) for x in lines), lines
    phases = [LINE.match(x)["phase"] for x in lines]
    assert "read the input" in phases and "engine mdav" in phases
    engine = [LINE.match(x) for x in lines if LINE.match(x)["phase"] == "engine mdav"]
    assert all(m["done"] == "400" and m["total"] == "1,000" for m in engine)


def test_nothing_is_printed_within_the_first_interval_or_when_disabled(monkeypatch):
    monkeypatch.setenv("STREAMANON_PROGRESS_SECONDS", "30")
    out = io.StringIO()
    with shown(Progress(), "work", stream=out) as progress:
        progress.enter("quick")
    monkeypatch.setenv("STREAMANON_PROGRESS_SECONDS", "0.01")
    with shown(Progress(), "work", enabled=False, stream=out):
        time.sleep(0.1)
    assert out.getvalue() == ""


def test_anonymize_into_a_pipe_prints_progress_lines(subprocesses, tmp_path: Path):
    rng = np.random.default_rng(0)
    pd.DataFrame(rng.normal(size=(60_000, 5)), columns=list("abcde")).to_csv(
        tmp_path / "x.csv", index=False)
    env = {**os.environ, "STREAMANON_PROGRESS_SECONDS": "0.1"}
    done = subprocess.run(
        [sys.executable, "-m", "streamanon", "anonymize", str(tmp_path / "x.csv"), "--qi",
         "a,b,c,d,e", "--k", "5", "--out", str(tmp_path / "r.csv"), "--seed", "1"],
        capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    lines = progress_lines(done.stderr)
    assert lines and all(LINE.match(x) for x in lines), lines
    engine = [LINE.match(x) for x in lines
              if LINE.match(x)["phase"].startswith("engine mdav")]  # (compiling ...) or not
    assert engine, lines  # MDAV on 60,000 records takes most of a second at least
    counted = [m for m in engine if m["total"]]
    assert counted and all(m["total"] == "60,000" for m in counted)
    assert any(int(m["rate"].replace(",", "")) > 0 for m in counted)
    assert "\x1b" not in done.stderr  # no terminal control codes in a pipe


def test_report_into_a_pipe_prints_its_phases(subprocesses, tmp_path: Path):
    rng = np.random.default_rng(1)
    pd.DataFrame(rng.normal(size=(3_000, 3)), columns=list("abc")).to_csv(
        tmp_path / "x.csv", index=False)
    (tmp_path / "s.toml").write_text("[schema]\na = { role = \"quasi_identifier\" }\n"
                                     "b = { role = \"quasi_identifier\" }\n"
                                     "c = { role = \"confidential\" }\n")
    env = {**os.environ, "STREAMANON_PROGRESS_SECONDS": "0.05"}
    run = [sys.executable, "-m", "streamanon"]
    assert subprocess.run([*run, "anonymize", str(tmp_path / "x.csv"), "--schema",
                           str(tmp_path / "s.toml"), "--k", "5", "--out",
                           str(tmp_path / "r.csv"), "--no-progress"],
                          capture_output=True, timeout=300).returncode == 0
    done = subprocess.run([*run, "report", str(tmp_path / "x.csv"), str(tmp_path / "r.csv"),
                           "--schema", str(tmp_path / "s.toml"), "--k", "5"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.startswith("streamanon: ")
             and not x.startswith("streamanon: warning")]
    assert lines and all(LINE.match(x) for x in lines), lines
    phases = {LINE.match(x)["phase"] for x in lines}
    assert phases & {"measure risk and utility", "anonymeter's attacks"}, phases


def test_a_run_that_compiles_says_so_while_and_after_it_compiles(monkeypatch):
    """numba compiles a new kernel within the shown work: the phase says so while it
    compiles, and a last line how many kernels and how long; work that compiles nothing
    (the same kernel again) prints no such line."""
    import numba

    monkeypatch.setenv("STREAMANON_PROGRESS_SECONDS", "0.05")

    def kernel(x):
        total = 0.0
        for i in range(x.size):
            total += x[i] * x[i]
        return total

    compiled = numba.njit(kernel)  # not cached: it compiles at its first call here
    out = io.StringIO()
    with shown(Progress(), "work", stream=out) as progress:
        progress.enter("engine toy")
        time.sleep(0.3)  # the watch attaches (numba is loaded)
        assert compiled(np.ones(4)) == 4.0
        time.sleep(0.3)  # a line while it compiled, or within a second after
    text = out.getvalue()
    assert COMPILED.match(text.splitlines()[-1]), text
    assert "streamanon: compiled 1 numba kernel in" in text
    phases = [LINE.match(x)["phase"] for x in progress_lines(text)]
    assert "engine toy (compiling numba kernels, once after an install)" in phases, text

    again = io.StringIO()
    with shown(Progress(), "work", stream=again) as progress:
        progress.enter("engine toy")
        time.sleep(0.2)
        assert compiled(np.ones(4)) == 4.0  # compiled: nothing to say
    assert "compil" not in again.getvalue()


def test_the_watch_attaches_only_to_numba_imported_whole(monkeypatch):
    """While the command's thread is importing numba, the watcher neither attaches nor
    imports: an import of numba from the watcher's thread then waited on numba's locks for
    ever, and a run that ended meanwhile waited for the watcher at its exit."""
    import types

    import numba

    from streamanon.cli._compiling import CompileWatch

    being_imported = types.ModuleType("numba")
    being_imported.__spec__ = types.SimpleNamespace(_initializing=True)
    monkeypatch.setitem(sys.modules, "numba", being_imported)
    watch = CompileWatch()
    assert not watch.attach()
    monkeypatch.setitem(sys.modules, "numba", numba)  # imported whole
    assert watch.attach()
    watch.detach()
