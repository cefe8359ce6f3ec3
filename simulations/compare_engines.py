"""Every registered engine on the same data: information loss against seconds.

    python -m simulations.compare_engines                       # 50,000 x 15, k = 10
    python -m simulations.compare_engines --n 5000 --repeat 1   # smoke run

Data: i.i.d. standard Gaussian n x m (seeded), standardised. Each engine runs in its own fresh
process (so one engine's threads and memory cannot slow the next), first on 1,000 records to
load its compiled kernels, then ``--repeat`` times on the data (median reported; engines slower
than ``--slow`` seconds run once). Per-record parameters: ``lda_mdav`` gets the binary label
``x_0 + x_1 + noise > 0``, ``dependence`` two confidential columns ``y = x_0 x_1 + noise`` and
``y = x_2^2 + noise`` with lambda = 0.5. The columns "x MDAV" are ratios to MDAV in the same run.
Writes ``results/compare_engines.csv`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys

from simulations.common import RESULTS, gaussian

# (engine, parameters) in the order of the table
CASES = [
    ("mdav", {}),
    ("mdav_star", {}),
    ("ona_star", {}),
    ("mondrian", {}),
    ("mondrian_v", {}),
    ("mondrian_v2d", {}),
    ("mona", {"rho": 0.3}),
    ("mona", {"rho": 0.5}),
    ("mona", {"rho": 0.7}),
    ("mona_2d", {"rho": 0.5}),
    ("pca_mdav", {}),
    ("pca_mdav_proximal", {}),
    ("lda_mdav", {"alpha": 8.0}),
    ("dependence", {"lam": 0.5}),
]


def data(n: int, m: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    X = gaussian(n, m, rng)
    labels = (X[:, 0] + X[:, 1] + 0.5 * rng.standard_normal(n) > 0).astype(int)
    Y = np.column_stack([X[:, 0] * X[:, 1], X[:, 2 % m] ** 2]) + 0.1 * rng.standard_normal((n, 2))
    return X, labels, Y


def measure(engine: str, params: dict, n: int, m: int, k: int, repeat: int,
            slow: float) -> dict:
    """Run inside the child process: time ``engine`` and return seconds and IL."""
    import time

    from streamanon.engines import get_engine, run_engine
    from streamanon.metrics import information_loss

    def with_records(labels, Y):
        extra = {}
        per_record = get_engine(engine).per_record
        if "labels" in per_record:
            extra["labels"] = labels
        if "Y" in per_record:
            extra["Y"] = Y
        return extra

    Xw, lw, Yw = data(1000, m, seed=1)
    run_engine(engine, Xw, k, **params, **with_records(lw, Yw))  # load compiled kernels
    X, labels, Y = data(n, m)
    seconds, il = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        cells = run_engine(engine, X, k, **params, **with_records(labels, Y))
        seconds.append(time.perf_counter() - started)
        il = information_loss(X, cells)
        if seconds[-1] > slow:
            break
    return {"seconds": statistics.median(seconds), "runs": len(seconds), "il": il}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--m", type=int, default=15)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--slow", type=float, default=20.0,
                        help="engines slower than this many seconds run once")
    parser.add_argument("--engines", default=None,
                        help="comma-separated engine names (default: all in the table)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        engine, params = json.loads(args.child)
        print(json.dumps(measure(engine, params, args.n, args.m, args.k, args.repeat,
                                 args.slow)))
        return 0
    chosen = set(args.engines.split(",")) if args.engines else None
    rows = []
    for engine, params in CASES:
        if chosen and engine not in chosen:
            continue
        out = subprocess.run(
            [sys.executable, "-m", "simulations.compare_engines", "--child",
             json.dumps([engine, params]), "--n", str(args.n), "--m", str(args.m), "--k",
             str(args.k), "--repeat", str(args.repeat), "--slow", str(args.slow)],
            capture_output=True, text=True, check=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
        label = engine + "".join(f" {key}={value}" for key, value in params.items())
        rows.append({"engine": label, **result})
        print(f"{label}: {result['seconds']:.2f} s, IL {result['il']:.2f} %", file=sys.stderr)
    base = next((r for r in rows if r["engine"] == "mdav"), None)
    print(f"{args.n:,} x {args.m} i.i.d. Gaussian, k = {args.k}; median of up to "
          f"{args.repeat} runs, each engine in a fresh process\n")
    print("| engine | seconds | runs | IL % | time x MDAV | IL - IL(MDAV) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        ratio = f"{r['seconds'] / base['seconds']:.2f}" if base else "-"
        diff = f"{r['il'] - base['il']:+.2f}" if base else "-"
        print(f"| {r['engine']} | {r['seconds']:.2f} | {r['runs']} | {r['il']:.2f} | {ratio} | "
              f"{diff} |")
    out_dir = RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "compare_engines.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["engine", "seconds", "runs", "il"])
        writer.writeheader()
        writer.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
