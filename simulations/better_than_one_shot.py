"""Two-stage releases against one-shot MDAV: how far ONA* and the anytime refinement take them.

    python -m simulations.better_than_one_shot                          # 50,000 x 15, a few min
    python -m simulations.better_than_one_shot --sizes 50000,200000,1000000 --ona-max-n 200000
    python -m simulations.better_than_one_shot --sizes 2000 --nu 0.1 --data gaussian   # smoke

For each data set (``gaussian``: i.i.d. standard normal n x m; ``census-like``: multivariate
normal with the CASC Census means and covariance, 13 columns) and each n, the rows arrive in
order: the first (1 - nu) n are the base snapshot, the rest arrive after it. nu is ``--nu``
(default 0.1, the issue's setting), or with ``--planned`` the planner's for each base engine
(:func:`scheduler.choice.choose` with the ONA*, MDAV and NN-split-end cost models calibrated
here, for uniform arrivals whose arrival coefficient is ``--arrival-coefficient``). Rows:

- one-shot MDAV on all n records: the reference (delta = 0) and its seconds after close;
- one-shot ONA*: what the slow engine achieves alone (no deadline could wait for it);
- 2MDAV (MDAV base, MDAV on the increment), NN-split-end (MDAV base);
- NN-split-end + refinement (MDAV base), ONA* base + NN-split-end, and ONA* base +
  NN-split-end + refinement (:mod:`streamanon.refine`, the late records' cells first), one
  row per budget of ``--refine`` (it stops earlier when no operation improves).

delta = D / D_MDAV - 1 (negative: less information loss than one-shot MDAV). "after close" is
the compute a release waits for once the survey closes: the incremental stage plus the
refinement (the base run is done before close); for one-shot rows, the whole run. ONA* rows
above ``--ona-max-n`` (one-shot) and ``--ona-base-max-n`` (base) are skipped, and the table
says so. With ``--planned``, each base engine's nu is the one the service's planner sets for
``--deadline`` seconds of compute after close (:func:`scheduler.choice.choose`, which also
says which engine it would run).

Prints markdown tables and writes ``results/better_than_one_shot.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from simulations.common import RESULTS, shown
from streamanon.engines import run_engine
from streamanon.incremental import run_stage
from streamanon.metrics import distortion, standardise
from streamanon.refine import refine_partition

DATA = ("gaussian", "census-like")


def make_data(kind: str, n: int, m: int, seed: int) -> np.ndarray:
    """Standardised records of ``kind`` (census-like has 13 columns whatever ``m``)."""
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        return standardise(rng.standard_normal((n, m)))
    if kind == "census-like":
        moments = json.loads(resources.files("streamanon").joinpath(
            "data/census_moments.json").read_text())
        return standardise(rng.multivariate_normal(moments["mean"], moments["cov"], n))
    raise SystemExit(f"--data: expected {' or '.join(DATA)}, got {kind!r}")


def planned_nus(n: int, m: int, k: int, arrival_coefficient: float, deadline: float,
                calibration_seconds: float = 8.0) -> tuple[dict[str, float], str]:
    """nu of each base engine as the service's planner sets it (:func:`scheduler.choice.choose`
    between ONA* and MDAV, NN-split-end, each with cost models calibrated here), for ``n``
    records arriving uniformly with the given arrival coefficient (relative to MDAV's one-shot
    time) and ``deadline`` seconds of compute after close; and the planner's choice."""
    from scheduler.arrivals import UniformForecast
    from scheduler.choice import Option, choose
    from scheduler.cost_model import calibrate, incremental_cost_model
    from streamanon.engines import get_engine
    from streamanon.service.engine_traits import engine_traits, stage_traits

    models = {engine: calibrate(get_engine(engine).function, m, k,
                                budget_seconds=calibration_seconds).model
              for engine in ("mdav", "ona_star")}
    nn_split_end = stage_traits("nn_split_end")
    options = [Option(engine_traits(engine), models[engine], incremental_cost_model(
        nn_split_end, models[engine], m, k, partition=lambda X, k: run_engine("mdav", X, k),
        run_stage=lambda b, bl, inc, k: run_stage("nn_split_end", b, bl, inc, k),
        split=models["mdav"])) for engine in ("ona_star", "mdav")]  # MDAV splits after both
    forecast = UniformForecast.from_arrival_coefficient(n, arrival_coefficient,
                                                        options[1].base_cost(n))
    choice = choose(forecast, options, k=k, stage=nn_split_end, deadline=deadline,
                    overhead=False)
    return {p.engine: p.nu for p in choice.candidates}, choice.reason


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - started


def warm_up(k: int, m: int) -> None:
    """Compile or load every kernel once, outside the timings."""
    X = standardise(np.random.default_rng(0).standard_normal((40 * k, m)))
    for engine in ("mdav", "ona_star"):
        base = run_engine(engine, X[:30 * k], k)
    for stage in ("two_stage", "nn_split_end"):
        labels = run_stage(stage, X[:30 * k], base, X[30 * k:], k)
    refine_partition(X, labels, k, max_rounds=2)


def one_case(kind: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    X = make_data(kind, n, args.m, args.seed)
    k = args.k
    if args.planned:
        nus, choice = planned_nus(n, X.shape[1], k, args.arrival_coefficient, args.deadline,
                                  args.calibration_seconds)
        source = (f"planner: arrival coefficient {args.arrival_coefficient:g}, "
                  f"{args.deadline:g} s of compute after close; {choice}")
    else:
        nus, source = {"mdav": args.nu, "ona_star": args.nu}, "--nu"
    n0s = {engine: n - max(round(nu * n), 1) for engine, nu in nus.items()}
    nus = {engine: (n - n0) / n for engine, n0 in n0s.items()}  # at least one late record
    rows: list[dict[str, Any]] = []

    def row(name: str, labels: np.ndarray | None, base_s: float | None = None,
            inc_s: float | None = None, refine: Any = None, one_shot_s: float | None = None,
            skipped: str | None = None) -> None:
        entry: dict[str, Any] = {"variant": name, "skipped": skipped, "nu": None}
        if labels is not None:
            if base_s is not None:  # a two-stage release: the increment of its base engine
                entry["nu"] = nus["ona_star" if name.startswith("ONA*") else "mdav"]
            refine_s = refine.seconds if refine is not None else 0.0
            entry.update(
                information_loss=100 * distortion(X, labels), base_seconds=base_s,
                incremental_seconds=inc_s, refine_seconds=refine_s if refine else None,
                refine_stopped=refine.stopped if refine else None,
                refine_operations=refine.operations if refine else None,
                after_close_seconds=one_shot_s if one_shot_s is not None else inc_s + refine_s)
        rows.append(entry)
        if args.progress:
            said = "skipped" if skipped else f"IL {entry['information_loss']:.3f}"
            print(f"  {kind} n={n:,}: {name}: {said}", flush=True)

    def refined(name: str, labels: np.ndarray, base_s: float, inc_s: float,
                n0: int) -> None:
        late = np.arange(n0, n)
        for budget in args.refine:  # the budget bounds it, not a number of rounds
            r = refine_partition(X, labels, k, budget_seconds=budget, first=late,
                                 max_rounds=10_000)
            row(f"{name} + refinement ({budget:g} s)", r.labels, base_s, inc_s, r)

    mdav_all, mdav_s = timed(run_engine, "mdav", X, k)
    row("one-shot MDAV", mdav_all, one_shot_s=mdav_s)
    ona_ok = n <= args.ona_max_n
    why = f"n > --ona-max-n {args.ona_max_n:,}"
    if ona_ok:
        ona_all, ona_s = timed(run_engine, "ona_star", X, k)
        row("one-shot ONA*", ona_all, one_shot_s=ona_s)
    else:
        row("one-shot ONA*", None, skipped=why)
    n0 = n0s["mdav"]
    mdav_base, mdav_base_s = timed(run_engine, "mdav", X[:n0], k)
    two, two_s = timed(run_stage, "two_stage", X[:n0], mdav_base, X[n0:], k)
    row("2MDAV", two, mdav_base_s, two_s)
    nnse, nnse_s = timed(run_stage, "nn_split_end", X[:n0], mdav_base, X[n0:], k)
    row("NN-split-end", nnse, mdav_base_s, nnse_s)
    refined("NN-split-end", nnse, mdav_base_s, nnse_s, n0)
    if n <= args.ona_base_max_n:
        n0 = n0s["ona_star"]
        ona_base, ona_base_s = timed(run_engine, "ona_star", X[:n0], k)
        onse, onse_s = timed(run_stage, "nn_split_end", X[:n0], ona_base, X[n0:], k)
        row("ONA* base + NN-split-end", onse, ona_base_s, onse_s)
        refined("ONA* base + NN-split-end", onse, ona_base_s, onse_s, n0)
    else:
        base_why = f"n > --ona-base-max-n {args.ona_base_max_n:,}"
        row("ONA* base + NN-split-end", None, skipped=base_why)
        for budget in args.refine:
            row(f"ONA* base + NN-split-end + refinement ({budget:g} s)", None,
                skipped=base_why)
    reference = rows[0]["information_loss"]
    for entry in rows:
        if entry["skipped"] is None:
            entry["delta_percent"] = 100 * (entry["information_loss"] / reference - 1)
    return {"data": kind, "n": n, "m": X.shape[1], "k": k,
            "nu": nus,
            "n_base": n0s, "nu_source": source, "rows": rows}


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def table(case: dict[str, Any]) -> str:
    nu = case["nu"]
    said = (f"nu = {nu['mdav']:.4f}" if nu["mdav"] == nu["ona_star"] else
            f"nu = {nu['mdav']:.4f} (MDAV base), {nu['ona_star']:.4f} (ONA* base)")
    lines = [f"**{case['data']}, n = {case['n']:,}, m = {case['m']}, k = {case['k']}, "
             f"{said}** ({case['nu_source']})", "",
             "| variant | nu | IL % | delta vs one-shot MDAV | base s | incremental s | "
             "refinement s | after close s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in case["rows"]:
        if r["skipped"]:
            lines.append(f"| {r['variant']} | | skipped ({r['skipped']}) | | | | | |")
            continue
        refine = _cell(r["refine_seconds"], ".2f")
        if r["refine_stopped"]:
            refine += f" ({r['refine_stopped']}, {r['refine_operations']:,} ops)"
        lines.append(
            f"| {r['variant']} | {_cell(r['nu'], '.4f')} | {r['information_loss']:.3f} | "
            f"{r['delta_percent']:+.1f} % | "
            f"{_cell(r['base_seconds'], '.2f')} | {_cell(r['incremental_seconds'], '.3f')} | "
            f"{refine} | {r['after_close_seconds']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--data", default=",".join(DATA),
                        help="comma-separated: gaussian, census-like (default both)")
    parser.add_argument("--sizes", default="50000",
                        help="comma-separated n (default 50000; 200000 and 1000000 take long)")
    parser.add_argument("--m", type=int, default=15, help="columns of gaussian (default 15)")
    parser.add_argument("--k", type=int, default=10, help="anonymity parameter (default 10)")
    parser.add_argument("--nu", type=float, default=0.1,
                        help="data ratio of the increment (default 0.1)")
    parser.add_argument("--planned", action="store_true",
                        help="use the planner's nu of each base engine instead of --nu: the "
                             "service's choice between ONA* and MDAV for --deadline")
    parser.add_argument("--arrival-coefficient", type=float, default=8.0,
                        help="arrival coefficient s of --planned, relative to MDAV's one-shot "
                             "time (default 8)")
    parser.add_argument("--deadline", type=float, default=2.0,
                        help="seconds of compute after close that --planned plans for "
                             "(default 2, the issue's target)")
    parser.add_argument("--refine", default="5,60", metavar="SECONDS,...",
                        help="refinement budgets, a row each (default 5,60; a refinement stops "
                             "earlier once no operation improves)")
    parser.add_argument("--calibration-seconds", type=float, default=8.0,
                        help="budget of each cost-model calibration of --planned (default 8)")
    parser.add_argument("--ona-max-n", type=int, default=60_000,
                        help="skip one-shot ONA* above this n (default 60000)")
    parser.add_argument("--ona-base-max-n", type=int, default=250_000,
                        help="skip the ONA* base rows above this n (default 250000)")
    parser.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    parser.add_argument("--out", type=Path, default=RESULTS / "better_than_one_shot.json")
    parser.add_argument("--quiet", dest="progress", action="store_false",
                        help="no progress lines")
    args = parser.parse_args(argv)
    kinds = [d.strip() for d in args.data.split(",") if d.strip()]
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.refine = [float(s) for s in args.refine.split(",") if s.strip()]
    if not 0 < args.nu < 1:
        parser.error("--nu must be in (0, 1)")
    warm_up(args.k, args.m)
    cases = []
    for kind in kinds:
        for n in sizes:
            cases.append(one_case(kind, n, args))
            print(table(cases[-1]) + "\n", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": "python -m simulations.better_than_one_shot "
                   + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
        "refine_budget_seconds": args.refine, "cases": cases}, indent=2))
    print(f"wrote {shown(args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
