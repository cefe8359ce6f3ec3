"""simulations/bench_pipeline.py: a smoke run on one real survey (ANES, 33,830 people), and its
table for two checkouts (no speed assertions)."""

from __future__ import annotations

import contextlib
import io

from simulations import bench_pipeline


def rows_of(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 3 and cells[1] and not cells[1].startswith("-"):
            rows[cells[1]] = cells[2:]
    return rows


def test_the_steps_add_up_to_the_profiled_process(subprocesses):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench_pipeline.main(["--surveys", "anes_partytherms", "--repeat", "1"]) == 0
    rows = rows_of(out.getvalue())
    assert rows["whole process (median of 1)"][0].startswith("**")
    steps = ["start", *(s for s, _ in bench_pipeline.STEPS), "rest"]
    parts = sum(float(rows[s][0].removesuffix(" s")) for s in steps)
    assert abs(parts - float(rows["total (profiled)"][0].removesuffix(" s"))) < 0.05
    assert float(rows["engine"][0].removesuffix(" s")) > 0
    imports = float(rows["imports (within the above)"][0].removesuffix(" s"))
    assert 0 < imports < float(rows["total (profiled)"][0].removesuffix(" s"))
    il, cells = rows["information loss, cells"][0].split(", ", 1)
    assert float(il.removesuffix(" %")) > 0 and int(cells.replace(",", "")) * 5 <= 33_830


def test_the_table_puts_the_checkouts_side_by_side():
    side = {"seconds": 2.0, "runs": [2.0, 2.1], "il": 0.0123, "cells": 1497,
            "steps": {"start": 0.5, "engine": 1.0, "total (profiled)": 2.2}}
    text = bench_pipeline.table({"military": {"before": {**side, "seconds": 9.0}, "after": side}},
                                ["before", "after"])
    rows = rows_of(text)
    assert rows["whole process (median of 2)"] == ["**9.00 s**", "**2.00 s**"]
    assert rows["engine"] == ["1.00 s", "1.00 s"]
    assert rows["information loss, cells"] == ["0.0123 %, 1,497"] * 2
