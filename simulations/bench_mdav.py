"""Benchmark of the `mdav` engine against a plain NumPy MDAV and the paper's Matlab times.

Data: i.i.d. standard Gaussian, m = 15 (paper 001, Table 3), seeded. Every case runs in a fresh
subprocess, so the peak RSS is that case's own; kernels are compiled before the clock starts.
The fast engine runs ``--repeat`` times (median reported); the NumPy baseline runs once, on the
sizes where it finishes in reasonable time, and the two partitions are compared.

    python -m simulations.bench_mdav                 # full table, writes results/bench_mdav.json
    python -m simulations.bench_mdav --sizes 5000,20000 --ks 10 --repeat 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from simulations.common import RESULTS, gaussian, seconds_cell

# Paper 001, Table 3 (Matlab, 2018): i.i.d. Gaussian, m = 15.
PAPER_SECONDS = {(50_000, 10): 46.12, (50_000, 100): 3.32, (1_000_000, 10): 3 * 3600 + 7 * 60}

TARGETS = [
    ((50_000, 10), "under 1 s", lambda row: row["seconds"] < 1.0),
    ((1_000_000, 10), "under 3 min and peak RSS under 1 GB",
     lambda row: row["seconds"] < 180 and row["peak_rss_mb"] < 1024),
    ((1_000_000, 10), "stretch: under 60 s", lambda row: row["seconds"] < 60),
]


def child(n: int, m: int, k: int, repeat: int, baseline: bool, seed: int) -> dict:
    """One case, in this process: returns timings, RSS and whether the partitions agree."""
    import resource

    from streamanon.engines.mdav import mdav
    from streamanon.metrics import information_loss

    mdav(np.random.default_rng(0).standard_normal((64, m)), 2)  # compile or load the kernels
    X = gaussian(n, m, seed)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        labels = mdav(X, k)
        times.append(time.perf_counter() - started)
    row = {
        "n": n, "m": m, "k": k, "seconds": statistics.median(times), "runs": times,
        "information_loss": information_loss(X, labels),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if baseline:
        from simulations.baselines import numpy_mdav

        started = time.perf_counter()
        reference = numpy_mdav(X, k)
        row["numpy_seconds"] = time.perf_counter() - started
        row["same_partition"] = bool(np.array_equal(reference, labels))
    return row


def run_case(n: int, m: int, k: int, repeat: int, baseline: bool, seed: int) -> dict:
    code = (
        "import json; from simulations.bench_mdav import child; "
        f"print(json.dumps(child({n}, {m}, {k}, {repeat}, {baseline}, {seed})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fit_exponent(rows: list[dict], k: int, min_n: int) -> float | None:
    """b of t = a n^b, least squares in log-log over the sizes >= min_n."""
    pts = [(r["n"], r["seconds"]) for r in rows if r["k"] == k and r["n"] >= min_n]
    if len(pts) < 2:
        return None
    b, _ = np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)
    return float(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000,20000,50000,100000,200000,1000000")
    parser.add_argument("--ks", default="10,100")
    parser.add_argument("--m", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-max-n", type=int, default=50_000,
                        help="run the NumPy baseline up to this n (default 50000)")
    parser.add_argument("--seed", type=int, default=2018)
    parser.add_argument("--out", default=str(RESULTS / "bench_mdav.json"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ks = [int(k) for k in args.ks.split(",")]

    rows = []
    for k in ks:
        for n in sizes:
            row = run_case(n, args.m, k, args.repeat, n <= args.baseline_max_n, args.seed)
            rows.append(row)
            print(f"  done n={n} k={k}: {row['seconds']:.3f} s", file=sys.stderr)

    import numba

    print(f"\nMDAV-generic, i.i.d. Gaussian, m = {args.m}; {numba.get_num_threads()} threads; "
          f"median of {args.repeat} runs\n")
    print("| n | k | streamanon s | NumPy s | speed-up vs NumPy | same partition "
          "| paper (Matlab) s | speed-up vs paper | peak RSS MB | IL % |")
    print("|---:|---:|---:|---:|---:|:---:|---:|---:|---:|---:|")
    for r in rows:
        paper = PAPER_SECONDS.get((r["n"], r["k"])) if r["m"] == 15 else None
        numpy_s = r.get("numpy_seconds")
        cells = [
            f"{r['n']:,}", str(r["k"]), seconds_cell(r["seconds"]), seconds_cell(numpy_s),
            f"{numpy_s / r['seconds']:.0f}x" if numpy_s else "-",
            {True: "yes", False: "NO"}.get(r.get("same_partition"), "-"),
            seconds_cell(paper), f"{paper / r['seconds']:.0f}x" if paper else "-",
            f"{r['peak_rss_mb']:.0f}", f"{r['information_loss']:.2f}",
        ]
        print("| " + " | ".join(cells) + " |")
    print()
    fits = {}
    for k in ks:
        b = fit_exponent(rows, k, 20_000)
        fits[k] = b
        print(f"fitted exponent b of t = a n^b (n >= 20,000), k = {k}: "
              f"{'-' if b is None else f'{b:.2f}'}")
    print()
    for (n, k), text, check in TARGETS:
        match = [r for r in rows if (r["n"], r["k"]) == (n, k) and r["m"] == 15]
        if match:
            verdict = "met" if check(match[0]) else "MISSED"
            print(f"target {n:,} x 15, k = {k}, {text}: {verdict} "
                  f"({seconds_cell(match[0]['seconds'])} s, {match[0]['peak_rss_mb']:.0f} MB)")

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "exponents": fits}, indent=2))
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
