"""``python -m simulations.bench_store_index`` (docs/benchmarks/service.md): one row of
figures per step, one column per variant (a smoke run, no speed asserted)."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from simulations import bench_store_index


def test_the_store_index_benchmark_prints_its_table(subprocesses):  # git, for the commit
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        bench_store_index.main(["--rows", "20000", "--step", "10000"])
    out = printed.getvalue()
    rows = re.findall(r"^\| (10,000|20,000) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert [r[0] for r in rows] == ["10,000", "20,000"]
    assert all(float(x) > 0 for r in rows for x in r[1:])
    assert "command: python -m simulations.bench_store_index --rows 20000 --step 10000" in out


def test_a_step_that_is_not_a_whole_number_of_batches_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_store_index.main(["--step", "1234"])
    assert exit_.value.code == 2 and "--step must be" in capsys.readouterr().err
