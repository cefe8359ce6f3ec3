"""``python -m simulations.bench_nn_search`` (docs/benchmarks/incremental.md): one row per base,
late share and stage, every search giving the same labels (a smoke run, no speed asserted)."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from simulations import bench_nn_search


def test_the_search_benchmark_prints_one_row_per_case_with_the_same_labels(subprocesses):
    printed = io.StringIO()  # (git, for the commit)
    with contextlib.redirect_stdout(printed):
        bench_nn_search.main(["--bases", "300,2000", "--ms", "3,12", "--late", "0.1",
                              "--repeat", "1"])
    out = printed.getvalue()
    rows = re.findall(r"^\| (\d+) \| ([\d,]+) \| [\d,]+ \| [\d,]+ \| (nn_split_\w+) \| .* \| "
                      r"(kdtree|blocks|scan) \| (yes|NO) \|$", out, re.M)
    # per m: two bases with nn_split_end, the largest also with nn_split_mid
    assert len(rows) == 6
    assert {r[4] for r in rows} == {"yes"}
    assert {r[3] for r in rows if r[0] == "3"} == {"kdtree"}  # few columns: the tree
    assert "command: python -m simulations.bench_nn_search --bases 300,2000 --ms 3,12" in out


def test_a_late_share_outside_0_1_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_nn_search.main(["--late", "1.5"])
    assert exit_.value.code == 2 and "--late" in capsys.readouterr().err
