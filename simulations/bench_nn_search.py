"""The nearest-centroid searches of the NN stages on the same base and late records.

    python -m simulations.bench_nn_search                     # the default grid, about 3 minutes
    python -m simulations.bench_nn_search --bases 20000 --ms 15 --repeat 1   # a quick look

For each base size n_0 and number of quasi-identifiers m: n_0 i.i.d. standard Gaussian records
partitioned by MDAV (k = 10), then ``--late`` shares of n_0 late records of the same
distribution adjoined by ``nn_split_end`` (and ``nn_split_mid`` at the largest base) with each
search (``index`` = ``scan``, ``blocks``, and ``kdtree`` for m <= 8), each timed ``--repeat``
times after a warm-up (the fastest is printed), all in one process. Every row says which search
``auto`` takes there and whether all searches gave the same labels (they must: the search
changes the time, never the assignment).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from simulations.common import commit, gaussian, machine
from streamanon.engines import run_engine
from streamanon.incremental import run_stage
from streamanon.incremental.nn import TREE_MAX_DIMENSION, search_for

K = 10


def timed(repeat: int, stage: str, base: np.ndarray, labels: np.ndarray, late: np.ndarray,
          index: str) -> tuple[np.ndarray, float]:
    """The stage's labels and its fastest time of ``repeat`` runs (after one untimed)."""
    result = run_stage(stage, base, labels, late, K, index=index)
    best = np.inf
    for _ in range(repeat):
        started = time.perf_counter()
        result = run_stage(stage, base, labels, late, K, index=index)
        best = min(best, time.perf_counter() - started)
    return result, best


def rows(bases: list[int], ms: list[int], late: list[float], repeat: int,
         seed: int) -> list[dict]:
    out = []
    rng = np.random.default_rng(seed)
    for m in ms:
        for n0 in bases:
            data = gaussian(n0 + int(max(late) * n0), m, rng)
            labels = run_engine("mdav", data[:n0], K)
            n_cells = int(labels.max()) + 1
            stages = ["nn_split_end"] + (["nn_split_mid"] if n0 == max(bases) else [])
            for stage in stages:
                for share in late:
                    inc = data[n0:n0 + int(share * n0)]
                    searches = ["scan", "blocks"] + (["kdtree"] if m <= TREE_MAX_DIMENSION
                                                     else [])
                    got = {s: timed(repeat, stage, data[:n0], labels, inc, s)
                           for s in searches}
                    first = next(iter(got.values()))[0]
                    out.append({"m": m, "n0": n0, "late": len(inc), "stage": stage,
                                "cells": n_cells, "auto": search_for("auto", m, n_cells),
                                "seconds": {s: t for s, (_, t) in got.items()},
                                "same": all(np.array_equal(first, r) for r, _ in got.values())})
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bases", default="20000,100000,400000",
                        help="base sizes n_0, comma-separated (default 20000,100000,400000)")
    parser.add_argument("--ms", default="8,15,30",
                        help="numbers of quasi-identifiers, comma-separated (default 8,15,30)")
    parser.add_argument("--late", default="0.005,0.05",
                        help="late records as shares of n_0, comma-separated (default "
                             "0.005,0.05)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the data (default 1)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    bases = [int(x) for x in args.bases.split(",")]
    ms = [int(x) for x in args.ms.split(",")]
    late = [float(x) for x in args.late.split(",")]
    if min(bases) < 2 * K or min(ms) < 1 or not all(0 < s <= 1 for s in late):
        parser.error(f"--bases must be at least {2 * K}, --ms at least 1 and --late in (0, 1]")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    table = rows(bases, ms, late, args.repeat, args.seed)
    command = ("python -m simulations.bench_nn_search " + " ".join(
        f"--{name} {value}" for name, value in (("bases", args.bases), ("ms", args.ms),
                                                ("late", args.late),
                                                ("repeat", args.repeat))))
    print(f"NN stages, nearest-centroid search, k = {K}, fastest of {args.repeat}; {started}, "
          f"commit {commit()}, {machine()}; command: {command}\n")
    print("| m | base | cells | late | stage | scan | blocks | k-d tree | auto takes | "
          "same labels |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|---|:---:|")
    for r in table:
        s = r["seconds"]
        tree = f"{s['kdtree']:.3f} s" if "kdtree" in s else "-"
        print(f"| {r['m']} | {r['n0']:,} | {r['cells']:,} | {r['late']:,} | {r['stage']} | "
              f"{s['scan']:.3f} s | {s['blocks']:.3f} s | {tree} | {r['auto']} | "
              f"{'yes' if r['same'] else 'NO'} |")


if __name__ == "__main__":
    main()
