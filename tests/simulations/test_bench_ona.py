"""simulations/bench_ona.py: a smoke run with tiny sizes (no speed assertions)."""

from __future__ import annotations

import contextlib
import io

import pytest

from simulations import bench_ona


@pytest.mark.heavy  # seconds of computation: make test runs it, make check leaves it out
def test_the_benchmark_prints_every_variant_and_exact_equals_exhaustive():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert bench_ona.main(["--sizes", "120,300", "--k", "3", "--m", "4",
                               "--exhaustive-max", "200", "--exact-max", "300",
                               "--candidates", "4,1000"]) == 0
    text = out.getvalue()
    rows = [line for line in text.splitlines() if line.startswith(("| 120 ", "| 300 "))]
    small = [row for row in rows if row.startswith("| 120 ")]
    large = [row for row in rows if row.startswith("| 300 ")]
    # MDAV* indexed and exhaustive; ONA* exhaustive, exact, C=4, C=1000
    assert len(small) == 6 and len(large) == 4
    assert all(row.rstrip().endswith("| yes |") for row in small
               if "| exact |" in row or "C=1000" in row or "| indexed |" in row)
    assert any("| ONA* | exact |" in row and "| - |" in row for row in large)  # the reference
    assert all("| exact |" in row for row in large if "C=1000" in row)  # compared with exact
    assert "ONA* C=4: t = " in text


def test_markdown_marks_a_differing_partition():
    rows = [{"n": 1000, "engine": "ONA*", "search": "exact", "seconds": 8.0, "il": 1.0},
            {"n": 1000, "engine": "ONA*", "search": "C=4", "seconds": 2.0, "il": 1.01,
             "ref_seconds": 8.0, "ref_il": 1.0, "ref_search": "exact", "same": False}]
    text = bench_ona.markdown(rows)
    assert "| 1,000 | ONA* | C=4 | 2.00 | exact | 4.0x | 1.010 | +1.000 | NO |" in text
    assert "| 1,000 | ONA* | exact | 8.00 | - | - | 1.000 | - | - |" in text
