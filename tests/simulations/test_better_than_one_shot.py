"""simulations/better_than_one_shot.py: the refinement table on tiny data."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

from simulations import better_than_one_shot
from simulations.common import ROOT


def test_tables_and_json_with_the_onas_skipped_above_their_limit(tmp_path):
    out = io.StringIO()
    path = tmp_path / "result.json"
    with contextlib.redirect_stdout(out):
        assert better_than_one_shot.main([
            "--sizes", "600,900", "--nu", "0.1", "--k", "5", "--m", "4", "--data",
            "gaussian,census-like", "--ona-max-n", "700", "--ona-base-max-n", "800",
            "--refine", "1", "--out", str(path), "--quiet"]) == 0
    printed = out.getvalue()
    assert "| ONA* base + NN-split-end + refinement (1 s) |" in printed
    assert "skipped (n > --ona-max-n 700)" in printed
    assert "| ONA* base + NN-split-end | | skipped (n > --ona-base-max-n 800)" in printed
    result = json.loads(path.read_text())
    assert [(c["data"], c["n"]) for c in result["cases"]] == [
        ("gaussian", 600), ("gaussian", 900), ("census-like", 600), ("census-like", 900)]
    for case in result["cases"]:
        rows = {r["variant"]: r for r in case["rows"]}
        assert rows["one-shot MDAV"]["delta_percent"] == 0
        refined, plain = rows["NN-split-end + refinement (1 s)"], rows["NN-split-end"]
        assert refined["information_loss"] <= plain["information_loss"]
        assert refined["after_close_seconds"] >= refined["refine_seconds"]
        assert (rows["one-shot ONA*"]["skipped"] is None) == (case["n"] <= 700)
        assert (rows["ONA* base + NN-split-end"]["skipped"] is None) == (case["n"] <= 800)
        assert rows["NN-split-end"]["nu"] == case["nu"]["mdav"] == 0.1


def test_planned_takes_each_base_engines_nu_from_the_planners_choice(tmp_path):
    out = io.StringIO()
    path = tmp_path / "result.json"
    with contextlib.redirect_stdout(out):
        assert better_than_one_shot.main([
            "--sizes", "3000", "--k", "5", "--m", "4", "--data", "gaussian", "--planned",
            "--deadline", "0.02", "--calibration-seconds", "0.3", "--refine", "0.2",
            "--out", str(path), "--quiet"]) == 0
    case = json.loads(path.read_text())["cases"][0]
    # the planner's reason, whichever way the calibration on this machine (0.3 s, while other
    # tests run) made it go: an engine meets the deadline, or none does (it failed so once)
    assert case["nu_source"].startswith("planner:")
    assert ("against one-shot MDAV" in case["nu_source"]
            or "meets the deadline: " in case["nu_source"]), case["nu_source"]
    rows = {r["variant"]: r for r in case["rows"]}
    for variant, engine in (("NN-split-end", "mdav"), ("ONA* base + NN-split-end", "ona_star")):
        nu = case["nu"][engine]
        assert 0 < nu < 1 and rows[variant]["nu"] == nu  # one late record at least
        assert case["n_base"][engine] == 3000 - max(round(nu * 3000), 1)


def test_help(subprocesses):
    done = subprocess.run([sys.executable, "-m", "simulations.better_than_one_shot", "--help"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    assert "--refine" in done.stdout and "--ona-max-n" in done.stdout
