"""Benchmark of ONA* and MDAV*: exhaustive reference, exact indexed search, restricted search.

Data: i.i.d. standard Gaussian, n x 15 (paper 001, Table 3), seeded. Kernels are compiled before
the clock starts; every variant runs in this process on the same data, one after the other, so
their ratios are what to quote on a busy machine. ONA* runs three ways:

- ``exhaustive``: the reference kernel, every cell scanned at every step (quadratic: minutes
  at 50,000), up to ``--exhaustive-max`` records; ONA*'s is the tests' oracle
  (``simulations/reference_kernels.py``);
- ``exact``: the indexed kernel with ``candidates=0``, the reference's labels bit for bit (still
  quadratic in the worst case), up to ``--exact-max`` records;
- ``C=...``: the restricted search with each ``--candidates`` value (not exact).

Speed-up, IL difference and "same labels" are against the exhaustive run, or the exact one when
the exhaustive did not run (they have the same labels). IL is SSE/SST in percent
(``streamanon.metrics``); the IL difference is relative, in percent of the reference's IL.
``--benchmarks`` adds the same comparison on the paper 004 benchmark files for every k of its
Table 1 (exact against restricted: at those sizes ONA*'s default is the exact search).

    python -m simulations.bench_ona                          # 5000, 20000, 50000
    python -m simulations.bench_ona --sizes 100000,200000 --exhaustive-max 0 --exact-max 0
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from simulations.common import ROOT, gaussian

DATASETS = ROOT / "tests" / "data"
TABLE_1_KS = (2, 3, 4, 5, 7, 10)


def _timed(fn, *args) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    labels = fn(*args)
    return time.perf_counter() - started, labels


def case(n: int, m: int, k: int, exhaustive: bool, exact: bool, candidates: list[int],
         seed: int) -> list[dict]:
    """Seconds, IL and labels of every variant of MDAV* and ONA* on one data set."""
    from streamanon.engines import _local_search_kernels as kern

    X = np.ascontiguousarray(gaussian(n, m, seed))
    runs = [("MDAV*", "indexed", kern.mdav_star_labels, (X, k))]
    if exhaustive:
        from simulations.reference_kernels import ona_star_labels_exhaustive

        runs.append(("MDAV*", "exhaustive", kern.mdav_star_labels_exhaustive, (X, k)))
        runs.append(("ONA*", "exhaustive", ona_star_labels_exhaustive,
                     (X, k, 30, np.zeros(4, np.int64))))
    if exact:
        runs.append(("ONA*", "exact", kern.ona_star_labels, (X, k, 30, np.zeros(6, np.int64), 0)))
    for c in candidates:
        runs.append(("ONA*", f"C={c}", kern.ona_star_labels,
                     (X, k, 30, np.zeros(6, np.int64), c)))
    return [_entry(X, n, engine, search, fn, args) for engine, search, fn, args in runs]


def _entry(X: np.ndarray, n: int, engine: str, search: str, fn, args) -> dict:
    from streamanon.metrics import information_loss

    seconds, labels = _timed(fn, *args)
    return {"n": n, "engine": engine, "search": search, "seconds": seconds,
            "il": information_loss(X, labels), "labels": labels}


def compare(rows: list[dict]) -> list[dict]:
    """Each row with ``ref_seconds``, ``ref_il`` and ``same`` against its (n, engine)
    reference: the exhaustive run, else the exact one, else none."""
    out = []
    for r in rows:
        group = [g for g in rows if g["n"] == r["n"] and g["engine"] == r["engine"]]
        ref = next((g for g in group if g["search"] == "exhaustive"),
                   next((g for g in group if g["search"] == "exact"), None))
        entry = {key: value for key, value in r.items() if key != "labels"}
        if ref is not None and ref["search"] != r["search"]:
            entry.update(ref_seconds=ref["seconds"], ref_il=ref["il"], ref_search=ref["search"],
                         same=bool(np.array_equal(ref["labels"], r["labels"])))
        out.append(entry)
    return out


def _cell(value: float | None, fmt: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, fmt) + suffix


def markdown(rows: list[dict]) -> str:
    """One line per (size, engine, search), compared with the reference (``compare``)."""
    lines = ["| n | engine | search | s | vs | speed-up | IL % | IL diff % | same labels |",
             "|---:|:---|:---|---:|:---|---:|---:|---:|:---:|"]
    for r in rows:
        ref_s, ref_il = r.get("ref_seconds"), r.get("ref_il")
        same = {True: "yes", False: "NO"}.get(r.get("same"), "-")
        lines.append(
            f"| {r['n']:,} | {r['engine']} | {r['search']} | {r['seconds']:.2f} | "
            f"{r.get('ref_search', '-')} | {_cell(ref_s and ref_s / r['seconds'], '.1f', 'x')} | "
            f"{r['il']:.3f} | {_cell(ref_il and 100 * (r['il'] / ref_il - 1), '+.3f')} | "
            f"{same} |")
    return "\n".join(lines)


def fit_exponent(rows: list[dict], engine: str, search: str) -> tuple[float, float] | None:
    """(a, b) of t = a n^b for one variant (least squares, log-log) over the sizes of 20,000
    and more, or all its sizes when fewer than two are that large."""
    rows = [r for r in rows if r["engine"] == engine and r["search"] == search]
    large = [r for r in rows if r["n"] >= 20_000]
    rows = large if len(large) >= 2 else rows
    if len(rows) < 2:
        return None
    b, log_a = np.polyfit(np.log([r["n"] for r in rows]),
                          np.log([r["seconds"] for r in rows]), 1)
    return float(np.exp(log_a)), float(b)


def benchmarks(folder: Path, candidates: list[int]) -> str:
    """ONA* exact against restricted on the paper 004 benchmark files, every k of Table 1."""
    import pandas as pd

    from streamanon.engines import _local_search_kernels as kern
    from streamanon.metrics import information_loss, standardise

    lines = ["| data | k | IL % exact | " + " | ".join(f"IL % C={c} | diff %" for c in candidates)
             + " |", "|:---|---:|---:|" + "---:|---:|" * len(candidates)]
    for name in ("census", "tarragona", "eia"):
        Z = np.ascontiguousarray(standardise(
            pd.read_csv(folder / f"{name}.csv").to_numpy(dtype=np.float64)))
        for k in TABLE_1_KS:
            exact = information_loss(Z, kern.ona_star_labels(Z, k, 30, np.zeros(4, np.int64), 0))
            cells = []
            for c in candidates:
                il = information_loss(Z, kern.ona_star_labels(Z, k, 30, np.zeros(4, np.int64), c))
                cells.append(f"{il:.3f} | {100 * (il / exact - 1):+.3f}")
            lines.append(f"| {name} | {k} | {exact:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from streamanon.engines.ona import RESTRICTED_CANDIDATES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5000,20000,50000",
                        help="comma-separated numbers of records (default 5000,20000,50000)")
    parser.add_argument("--k", type=int, default=10, help="minimum cell size (default 10)")
    parser.add_argument("--m", type=int, default=15, help="attributes (default 15)")
    parser.add_argument("--exhaustive-max", type=int, default=20_000,
                        help="run the exhaustive reference up to this n (default 20000)")
    parser.add_argument("--exact-max", type=int, default=50_000,
                        help="run the exact indexed search up to this n (default 50000)")
    parser.add_argument("--candidates", default=str(RESTRICTED_CANDIDATES),
                        help="comma-separated candidates of the restricted runs "
                             f"(default {RESTRICTED_CANDIDATES}, the engine's)")
    parser.add_argument("--benchmarks", action="store_true",
                        help=f"also compare exact and restricted on the files in {DATASETS}")
    parser.add_argument("--seed", type=int, default=2018)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    candidates = [int(c) for c in args.candidates.split(",") if c]

    warm = 8 * args.k
    case(warm, args.m, args.k, True, True, candidates, 0)  # compile or load every kernel
    rows = []
    for n in sizes:
        rows += case(n, args.m, args.k, n <= args.exhaustive_max, n <= args.exact_max,
                     candidates, args.seed)

    print(f"ONA* and MDAV*, i.i.d. Gaussian, m = {args.m}, k = {args.k}, seed {args.seed}; "
          f"every variant in the same process\n")
    print(markdown(compare(rows)))
    print()
    variants = dict.fromkeys((r["engine"], r["search"]) for r in rows)
    for engine, search in variants:
        fit = fit_exponent(rows, engine, search)
        if fit is not None:
            a, b = fit
            print(f"{engine} {search}: t = {a:.3g} n^{b:.2f}; at n = 1,000,000 that is "
                  f"{a * 1e6 ** b:.0f} s")
    if args.benchmarks:
        print("\nONA* on the paper 004 benchmark files (standardised)\n")
        print(benchmarks(DATASETS, candidates))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
