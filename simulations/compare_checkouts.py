"""The same engines and incremental stages in two checkouts of streamanon, in one run.

    python -m simulations.compare_checkouts --before ../old-checkout   # this tree is "after"
    python -m simulations.compare_checkouts --before A --after B --sizes 5000 --repeat 1

For a move or a refactoring that must change neither labels nor speed: each case runs in a fresh
process started in the checkout's root (so ``import streamanon`` takes that checkout's code),
first on 1,000 records to load its compiled kernels, then once on the seeded data; ``--repeat``
such processes a side, the two checkouts taking turns (before, after, before, after, ...) so
that a noisy machine slows both alike. Prints, per case, the median seconds of each side, their
ratio, and whether the labels are the same array (a SHA-256 of the int64 labels). Data: i.i.d.
standard Gaussian n x 15, standardised, the same seed on both sides; k = 10. Incremental stages
run on a base of the first 90 % (labelled by MDAV) and an increment of the rest.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from simulations.common import ROOT, commit, machine

ENGINES = ("mdav", "mdav_star", "ona_star")
STAGES = ("two_stage", "nn_split_end")

# Run in the checkout's root: only names both sides have (run_engine, run_stage, standardise).
CHILD = r"""
import hashlib, json, sys, time
import numpy as np
from streamanon.engines import run_engine
from streamanon.incremental import run_stage
from streamanon.metrics import standardise

kind, name, n, m, k, seed, repeat = json.loads(sys.argv[1])

def data(n):
    return np.ascontiguousarray(standardise(np.random.default_rng(seed).standard_normal((n, m))))

def once(X):
    if kind == "engine":
        return run_engine(name, X, k)
    cut = int(0.9 * len(X))
    base = run_engine("mdav", X[:cut], k)
    started = time.perf_counter()
    labels = run_stage(name, X[:cut], base, X[cut:], k)
    return labels, time.perf_counter() - started

once(data(1000))
X = data(n)
seconds, labels = [], None
for _ in range(repeat):
    started = time.perf_counter()
    out = once(X)
    if kind == "engine":
        labels, took = out, time.perf_counter() - started
    else:
        labels, took = out
    seconds.append(took)
digest = hashlib.sha256(np.asarray(labels, dtype=np.int64).tobytes()).hexdigest()[:16]
print(json.dumps({"seconds": seconds, "labels": digest}))
"""


def run_case(checkout: Path, kind: str, name: str, n: int, args) -> dict:
    spec = json.dumps([kind, name, n, args.m, args.k, args.seed, 1])
    done = subprocess.run([sys.executable, "-c", CHILD, spec], cwd=checkout, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {kind} {name} n={n} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True,
                        help="root of the checkout to compare against (e.g. a git worktree)")
    parser.add_argument("--after", type=Path, default=ROOT,
                        help="root of the other checkout (default: this one)")
    parser.add_argument("--sizes", default="20000,100000", help="comma-separated n")
    parser.add_argument("--m", type=int, default=15)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3,
                        help="turns per side (each a fresh process); the median is reported")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--stages", default=",".join(STAGES))
    args = parser.parse_args(argv)
    for side in (args.before, args.after):
        if not (side / "streamanon" / "__init__.py").is_file():
            parser.error(f"{side} is not a streamanon checkout (no streamanon/__init__.py)")
    cases = [("engine", e) for e in args.engines.split(",") if e] + \
            [("stage", s) for s in args.stages.split(",") if s]
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine()}")
    print(f"before: {args.before} (commit {commit(args.before)}); "
          f"after: {args.after} (commit {commit(args.after)})\n")
    print("| case | n | before (s) | after (s) | after / before | same labels |")
    print("|---|---:|---:|---:|---:|---|")
    all_same = True
    for kind, name in cases:
        for n in sizes:
            times = {"before": [], "after": []}
            digests = {}
            for _ in range(args.repeat):
                for side, root in (("before", args.before), ("after", args.after)):
                    result = run_case(root, kind, name, n, args)
                    times[side] += result["seconds"]
                    digests.setdefault(side, set()).add(result["labels"])
            b, a = statistics.median(times["before"]), statistics.median(times["after"])
            same = digests["before"] == digests["after"] and len(digests["after"]) == 1
            all_same &= same
            print(f"| {name} | {n:,} | {b:.3f} | {a:.3f} | {a / b:.2f} | "
                  f"{'yes' if same else 'NO'} |", flush=True)
    verdict = "the same in every case" if all_same else "DIFFER"
    print(f"\n{args.repeat} turns a side, median; labels {verdict}")
    return 0 if all_same else 1


if __name__ == "__main__":
    raise SystemExit(main())
