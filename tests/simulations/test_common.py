"""simulations/common.py, and the scripts as a package that is not installed: no script edits
sys.path, a script runs from the repository root as ``python -m simulations.NAME``, and the
wheel holds neither ``simulations`` nor ``tests``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulations.common import RESULTS, ROOT, clock, clock_hms, gaussian, seconds_cell, shown
from streamanon.metrics import standardise

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

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


def test_a_script_runs_as_a_module_from_the_repository_root(subprocesses, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-m", "simulations.plot_schedule", "--out",
                             str(tmp_path / "figures")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "figures").glob("fig*.png"))) == 7


def test_the_wheel_holds_neither_the_scripts_nor_the_tests():
    """The package discovery of pyproject.toml, as setuptools runs it when it builds the wheel
    (``find`` with namespaces): ``streamanon`` and ``scheduler`` only."""
    from setuptools import find_namespace_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]
    packages = find_namespace_packages(str(ROOT), include=find["include"],
                                       exclude=find.get("exclude", ()))
    assert {name.split(".")[0] for name in packages} == {"streamanon", "scheduler"}
