"""simulations/bench_real_surveys.py: a smoke run on one real survey (ANES, 33,830 people) and
small synthetic data (no speed assertions)."""

from __future__ import annotations

import contextlib
import io
import json

from simulations import bench_real_surveys


def test_the_benchmark_prints_a_row_per_survey_with_the_analysts_checks(subprocesses,
                                                                         tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench_real_surveys.main([
            "--surveys", "anes_partytherms", "--k", "5", "--synthetic", "4000:60",
            "--out", str(tmp_path / "rows.json")]) == 0
    text = out.getvalue()
    row = next(line for line in text.splitlines() if line.startswith("| anes_partytherms |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "33,830" and cells[2] == "6" and cells[4] == "5"
    assert cells[11].endswith(" SE")  # the thermometer regression, before and after
    saved = json.loads((tmp_path / "rows.json").read_text())
    (result,) = saved["rows"]
    assert result["cells"] * 5 <= result["n"] and 0 < result["changed"] <= 1
    assert set(result["margin_tvd"]) == {"stateabb", "educat", "race4", "incomeperc"}
    assert all(abs(c["shift_se"]) < 10 for c in result["coefficients"].values())
    (synthetic,) = saved["synthetic"]
    assert synthetic["collapsed_il"] <= synthetic["every_record_il"]


def test_an_anjana_run_cut_off_is_reported_as_such():
    rows = [{"survey": "military", "k": 5, "seconds": 8.0, "changed": 0.001,
             "anjana": {"timeout": 900.0}}]
    assert "did not finish in 900 s" in bench_real_surveys.anjana_table(rows)
