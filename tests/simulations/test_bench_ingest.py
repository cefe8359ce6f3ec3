"""simulations/bench_ingest.py: a smoke run with tiny settings (no speed assertions)."""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest

from simulations import bench_ingest

RATE, SECONDS, BACKLOG, STAGES = 2000, 3, 2000, 45_000


def run_once(tmp_path) -> tuple[dict, str]:
    out = tmp_path / "ingest.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert bench_ingest.main(["--rate", str(RATE), "--seconds", str(SECONDS),
                                  "--n-backlog", str(BACKLOG), "--repeat", "1",
                                  "--n-stages", str(STAGES),
                                  "--out", str(out)]) == 0
    return json.loads(out.read_text()), printed.getvalue()


def check_live(results: dict, printed: str) -> None:
    [live] = results["live"]
    assert live["n"] == RATE * SECONDS
    assert live["committed"] == live["stored"] == live["n"] and live["dead_lettered"] == 0
    assert live["caught_up"] and live["producer_errors"] == 0
    assert 0.5 * RATE < live["produced_per_second"] < 1.5 * RATE
    assert 0 < live["sustained_per_second"] < 2 * RATE
    assert 0 < live["overall_per_second"] < 2 * RATE
    assert 0 <= live["latency_p50"] <= live["latency_p99"] <= live["latency_max"] < 60
    assert live["done_after_last_produced"] is not None
    assert all(0 <= rate < 2 * RATE for rate in live["per_10s"])  # none at 3 s


def check_cpu(results: dict, printed: str) -> None:
    for kind in ("live", "drain"):
        [one] = results[kind]
        cpu = one["cpu_seconds"]
        assert set(cpu) == {"broker (Tansu)", "producer", "service main process",
                            "ingest worker(s)", "everything else on the machine"}
        assert all(math.isfinite(v) for v in cpu.values()) and one["cpu_wall_seconds"] > 0
        assert cpu["ingest worker(s)"] > 0


def check_drain(results: dict, printed: str) -> None:
    [drain] = results["drain"]
    assert drain["n"] == BACKLOG and drain["with_startup_per_second"] > 0
    # a backlog this small may fit one batch, which has no rate of its own
    assert drain["records_per_second"] is None or drain["records_per_second"] > 0


def check_summary(results: dict, printed: str) -> None:
    summary = results["summary"]
    # 2,000/s offered measures neither live target
    assert summary["live"]["target_met"] is None and summary["live"]["latency_target_met"] is None
    assert set(summary["drain"]) == {"records_per_second", "with_startup_per_second",
                                     "startup_seconds", "target_met"}
    lines = [line for line in printed.splitlines() if line.startswith("|")]
    assert lines[:2] == ["| measure | value |", "|---|---:|"]
    rows = dict(line.strip("|").split("|")[:2] for line in lines[2:])
    assert rows[" live: sustained ingest, committed to the store "].strip() == (
        f"{summary['live']['sustained_per_second']:,.0f} records/s")
    assert "target live >= 40,000/s sustained: not measured (offered 2,000/s)" in printed


def check_stages(results: dict, printed: str) -> None:
    stages = results["stages"]
    assert stages["n"] == STAGES
    assert set(stages) == {"n", *bench_ingest.STAGE_VARIANTS}
    for variant in bench_ingest.STAGE_VARIANTS:
        got = stages[variant]
        for part in ("first", "last"):
            times = got[part]
            assert all(times[s] > 0 for s in ("validate", "prepare", "store"))
            assert math.isclose(times["total"], times["validate"] + times["prepare"]
                                + times["store"])
        # 45,000 records are three batches: the first and the last fifth are different batches
        assert got["first"] != got["last"]
        ceiling = 1e6 / got["last"]["total"]
        assert (f"| one worker's ceiling ({variant}; 1 / total, last fifth) | "
                f"{ceiling:,.0f} records/s |") in printed


def test_one_tiny_run_measures_every_part(tmp_path, subprocesses):
    """One run (a minute of a broker, a service and a producer), every check on it: as
    separate tests sharing a module fixture, two test workers each made the run."""
    results, printed = run_once(tmp_path)
    check_live(results, printed)
    check_cpu(results, printed)
    check_drain(results, printed)
    check_summary(results, printed)
    check_stages(results, printed)


def live_run(rate: float, sustained: float, p99: float) -> dict:
    return {"rate_target": rate, "produced_per_second": rate, "sustained_per_second": sustained,
            "overall_per_second": sustained, "latency_p50": p99 / 4, "latency_p99": p99,
            "latency_max": p99 * 1.1, "done_after_last_produced": 1.0,
            "producer_kept_rate": True}


@pytest.mark.parametrize(("rate", "sustained", "p99", "expected"), [
    (40_000, 41_000, 30.0, ["target live >= 40,000/s sustained: met",
                            "target p99 produce-to-commit <= 1 s at 15,000/s offered: "
                            "not measured (offered 40,000/s)"]),
    (40_000, 30_979, 18.9, ["target live >= 40,000/s sustained: MISSED",
                            "target p99 produce-to-commit <= 1 s at 15,000/s offered: "
                            "not measured (offered 40,000/s)"]),
    (15_000, 15_000, 0.8, ["target live >= 40,000/s sustained: not measured (offered 15,000/s)",
                           "target p99 produce-to-commit <= 1 s at 15,000/s offered: met"]),
    (15_000, 15_000, 1.3, ["target live >= 40,000/s sustained: not measured (offered 15,000/s)",
                           "target p99 produce-to-commit <= 1 s at 15,000/s offered: MISSED"]),
])
def test_each_target_is_judged_only_by_a_run_at_its_rate(rate, sustained, p99, expected):
    """The targets: 40,000/s sustained, and p99 at most 1 s at 15,000/s offered; a run at one
    rate says nothing of the other's target."""
    summary = bench_ingest.summarise([live_run(rate, sustained, p99)], [])
    assert bench_ingest.target_lines(summary["live"]) == expected


def test_help_explains_the_options(capsys):
    with pytest.raises(SystemExit):
        bench_ingest.parse_args(["--help"])
    text = capsys.readouterr().out
    for option in ("--rate", "--seconds", "--n-backlog", "--n-stages", "--repeat", "--out"):
        assert option in text
    assert "produce-to-commit" in text
