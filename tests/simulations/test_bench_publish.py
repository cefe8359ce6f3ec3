"""simulations/bench_publish.py: a smoke run with tiny settings (no speed assertions), and the
command its benchmarks page shows."""

from __future__ import annotations

import contextlib
import io
import json

from simulations import bench_publish


def test_every_record_format_is_published_and_tabled(subprocesses):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        bench_publish.main(["--n", "2000", "--rounds", "2"])
    rows = [line for line in printed.getvalue().splitlines() if line.startswith("| ")]
    assert len(rows) == 4  # the head and one row per format
    assert "three headers" in rows[1] and "no headers" in rows[2]
    assert "produce_batch" in rows[3]
    for row in rows[1:]:
        loop, flush, total = (float(cell.strip().removesuffix(" s"))
                              for cell in row.split("|")[2:5])
        assert loop >= 0 and flush >= 0 and abs(loop + flush - total) < 0.015


def test_the_release_messages_are_json_records_of_cells():
    rows = [json.loads(m) for m in bench_publish.release_messages(25)]
    assert len(rows) == 25 and set(rows[0]) == {f"q{j}" for j in range(15)} | {"answer"}
    cell = {name: value for name, value in rows[0].items() if name != "answer"}
    assert all({q: row[q] for q in cell} == cell for row in rows[:10])  # a cell of 10
    assert rows[10]["q0"] != rows[0]["q0"]
