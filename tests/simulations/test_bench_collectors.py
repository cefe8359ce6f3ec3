"""Smoke test of simulations/bench_collectors.py: a tiny run prints its table."""

from __future__ import annotations

import pytest

from simulations import bench_collectors
from simulations.postgres import why_unavailable


def test_help_describes_the_benchmark(capsys):
    with pytest.raises(SystemExit):
        bench_collectors.parse_args(["--help"])
    assert "two service instances sharing one PostgreSQL" in capsys.readouterr().out


def test_a_tiny_run_prints_the_table(capsys):
    if why_unavailable():  # `make test` installs Debian's postgresql; never skip silently
        pytest.fail(f"PostgreSQL is needed: {why_unavailable()}")
    assert bench_collectors.main(["--n", "2000", "--repeat", "1", "--instances", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert "| instances | records/s (median) | ratio to one |" in out
    rows = [line for line in out.splitlines() if line.startswith("| 1 |")
            or line.startswith("| 2 |")]
    assert len(rows) == 2
    assert "cores: PostgreSQL" in out and "cores: broker (Tansu)" in out
