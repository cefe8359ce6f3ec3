"""simulations/bench_partitioned.py: a smoke run with tiny sizes (no speed assertions)."""

from __future__ import annotations

import contextlib
import io
import itertools
import json

import pytest

from simulations import bench_partitioned

N, PARTS, ROUNDS = 4000, (500, 2000), (0, 2)


@pytest.fixture(scope="module")
def run(tmp_path_factory, dask_clusters) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "partitioned.json"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert bench_partitioned.main(["--n", str(N), "--m", "4", "--k", "5", "--part-sizes",
                                       ",".join(map(str, PARTS)), "--workers", "1,2",
                                       "--refine", "1,2", "--part-rounds", "0,2",
                                       "--out", str(out)]) == 0
    return json.loads(out.read_text()), printed.getvalue()


def test_every_part_size_is_measured_against_exact_mdav(run):
    results, _ = run
    assert [(r["part_size"], r["rounds"]) for r in results["rows"]] == [
        (p, r) for p in PARTS for r in ROUNDS]
    assert results["exact_il"] > 0
    for r in results["rows"]:
        assert r["il"] >= results["exact_il"] * 0.9  # cutting rarely helps, never by much
        assert r["parts"] >= N // r["part_size"]


def test_every_cluster_size_gives_the_same_labels(run):
    results, _ = run
    assert {(t["part_size"], t["rounds"], t["workers"]) for t in results["timings"]} == {
        (p, r, w) for p in PARTS for r in ROUNDS for w in (1, 2)}
    assert all(t["same_labels"] and t["seconds"] > 0 and t["worker_peak_mb"] > 0
               for t in results["timings"])


def test_the_scale_model_names_a_limit_for_each_prediction(run):
    results, _ = run
    model = results["model"]
    assert len(model) == 9 * len(ROUNDS) and {r["part_size"] for r in model} == {PARTS[1]}
    assert all(r["limit"] in ("partitioning pass", "sending the parts",
                              "clustering on the workers") and r["seconds"] > 0 for r in model)


def test_the_tables_are_printed(run):
    _, printed = run
    assert "| part size | rounds | parts | IL % |" in printed
    assert "| part size | rounds | workers | end to end s |" in printed
    assert "### Scale model" in printed


def test_help_runs():
    with pytest.raises(SystemExit) as exit_info, \
            contextlib.redirect_stdout(io.StringIO()) as text:
        bench_partitioned.main(["--help"])
    assert exit_info.value.code == 0 and "--no-exact" in text.getvalue()


def test_local_search_rounds_on_the_parts_never_raise_the_loss(run):
    results, _ = run
    il = {(r["part_size"], r["rounds"]): r["il"] for r in results["rows"]}
    for p in PARTS:  # every move of the local search strictly lowers the SSE of its part
        assert il[p, 2] <= il[p, 0] + 1e-12


def test_refining_never_raises_the_loss_of_a_part_size(run):
    results, printed = run
    keys = [(p, r) for p in PARTS for r in ROUNDS]
    by_key = {key: [r for r in results["refined"] if (r["part_size"], r["rounds"]) == key]
              for key in keys}
    rows = {(r["part_size"], r["rounds"]): r for r in results["rows"]}
    for key, refined in by_key.items():
        assert refined, "every part size is refined"
        ils = [rows[key]["il"]] + [r["il"] for r in refined]
        assert all(b <= a + 1e-12 for a, b in itertools.pairwise(ils))
        assert all(r["stopped"] in ("budget", "converged") for r in refined)
    assert "| part size | rounds | refined for s | IL % | IL vs exact | stopped |" in printed
