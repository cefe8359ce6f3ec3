"""simulations/common.py, and the scripts as a package: no script edits sys.path, and a script
runs both as ``python simulations/NAME.py`` and as ``python -m simulations.NAME``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulations.common import RESULTS, ROOT, clock, clock_hms, gaussian, seconds_cell, shown
from streamanon.metrics import standardise

SCRIPTS = sorted((ROOT / "simulations").rglob("*.py"))


@pytest.mark.parametrize(("seconds", "text"), [
    (0.42, "0.42 s"), (12.4, "12 s"), (153.26, "2 min 33 s"), (5252.33, "1 h 27 min 32 s"),
    (3599.9999, "1 h 00 min 00 s")])
def test_clock(seconds, text):
    assert clock(seconds) == text


def test_figure_and_table_formats():
    assert clock_hms(5252.33) == "1:27:32"
    assert [seconds_cell(x) for x in (0.1234, 12.34, 11_220.0, None)] == [
        "0.123", "12.3", "3 h 7 min", "-"]


def test_gaussian_is_the_seeded_standardised_draw_and_continues_a_generator():
    expected = standardise(np.random.default_rng(7).standard_normal((50, 3)))
    np.testing.assert_array_equal(gaussian(50, 3, 7), expected)
    rng = np.random.default_rng(7)
    gaussian(50, 3, rng)
    reference = np.random.default_rng(7)
    reference.standard_normal((50, 3))
    assert rng.standard_normal() == reference.standard_normal()


def test_paths():
    assert RESULTS == ROOT / "simulations" / "results"
    assert shown(RESULTS / "x.csv") == Path("simulations/results/x.csv")


def test_no_script_edits_sys_path_or_names_a_machine_path():
    assert SCRIPTS
    for path in SCRIPTS:
        text = path.read_text()
        assert "sys.path" not in text, path
        for prefix in ("/work/", "/home/", "/tmp/"):
            assert prefix not in text, (path, prefix)


@pytest.mark.parametrize("command", [["simulations/plot_schedule.py"],
                                     ["-m", "simulations.plot_schedule"]])
def test_a_script_runs_as_a_file_and_as_a_module_from_anywhere(subprocesses, tmp_path, command):
    script = [str(ROOT / command[0])] if len(command) == 1 else command
    result = subprocess.run([sys.executable, *script, "--out", str(tmp_path / "figures")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "figures").glob("fig*.png"))) == 7
