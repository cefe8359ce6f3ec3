"""simulations/bench_position_reads.py: a smoke run with tiny settings (no speed assertions)."""

from __future__ import annotations

import contextlib
import io

from simulations import bench_position_reads
from streamanon.service import offsets


def test_each_read_is_timed_for_each_fetch_wait_and_the_setting_is_put_back(subprocesses):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        bench_position_reads.main(["--n", "30", "--repeat", "2", "--waits", "1,50"])
    rows = [line for line in printed.getvalue().splitlines() if line.startswith("| ")]
    assert len(rows) == 5  # the head and one row per read and wait
    cells = [[c.strip() for c in row.split("|")[1:-1]] for row in rows[1:]]
    assert {(c[0], c[1]) for c in cells} == {(read, wait) for read in (
        "high_watermarks", "messages_before_end") for wait in ("1", "50")}
    for c in cells:
        assert float(c[2]) >= 0 and len(c[3].split(", ")) == 2
    assert offsets.READ_FETCH_WAIT_MS == 1
