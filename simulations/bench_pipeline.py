"""Where ``streamanon anonymize`` spends its time on a real survey, step by step, in this
checkout and optionally in another one (an earlier commit), in one run.

    python -m simulations.bench_pipeline                                 # military, k = 5
    python -m simulations.bench_pipeline --before ../old-checkout --surveys military,tv16

Per checkout and survey (``simulations.bench_real_surveys``' surveys, their schemas in
``simulations/real_surveys/``): the whole ``anonymize`` process, ``--repeat`` times (the
checkouts taking turns, so that a noisy machine slows both alike; the median is shown), each a
fresh process started in the checkout's root so that ``python -m streamanon`` runs that
checkout's code; then one more run under ``cProfile``, whose cumulative times split the process
into steps by functions both checkouts have:

- start: the interpreter, the imports and the parser (the process less ``cmd_anonymize``);
- read: ``streamanon.io.read_table``;
- schema check: ``cli.anonymize._within_schema`` (every value against its declaration);
- prepare: ``streamanon.release.prepare`` (codes, tuples, embedding);
- engine: ``streamanon.engines.base.run_engine``;
- release: ``streamanon.release.release_prepared`` (the released values, the table, the gate,
  the loss, the risk measures);
- write: ``streamanon.io.write_table`` and ``write_json``;
- rest: what the process did besides (the modules a command imports when it needs them, the
  cost model's record of the run, the report);
- imports: the time spent importing modules, wherever it fell (in the start, in the rest or
  in a step that imported what it needed): a part of the rows above, not a step of its own.

The profiler slows Python-heavy steps more than compiled ones, so the steps add up to more than
the median whole process; they say where the time goes, the whole process says how long it
takes. Each release's information loss (its report) is printed beside its time: a change that
makes it faster must leave it as it was.
"""

from __future__ import annotations

import argparse
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from simulations.bench_real_surveys import SCHEMAS, SURVEYS, load
from simulations.common import ROOT, commit, machine

#: The steps and the functions (file suffix, name) whose cumulative time each is.
STEPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("read", (("streamanon/io.py", "read_table"),)),
    ("schema check", (("streamanon/cli/anonymize.py", "_within_schema"),)),
    ("prepare", (("streamanon/release.py", "prepare"),)),
    ("engine", (("streamanon/engines/base.py", "run_engine"),)),
    ("release", (("streamanon/release.py", "release_prepared"),)),
    ("write", (("streamanon/io.py", "write_table"), ("streamanon/io.py", "write_json"))),
)


def command(csv: Path, schema: Path, k: int, out: Path) -> list[str]:
    return ["anonymize", str(csv), "--schema", str(schema), "--k", str(k), "--out", str(out),
            "--seed", "1", "--no-progress"]


def whole(checkout: Path, args: list[str]) -> float:
    """Wall seconds of ``python -m streamanon ARGS`` started in ``checkout``."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "streamanon", *args], cwd=checkout, check=True,
                   capture_output=True)
    return time.perf_counter() - started


def steps(checkout: Path, args: list[str], profile: Path) -> dict[str, float]:
    """The process's steps (module docstring) from one run under cProfile."""
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "streamanon",
                    *args], cwd=checkout, check=True, capture_output=True)
    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]

    def cumulative(suffix: str, name: str) -> float:
        return sum(row[3] for (path, _, func), row in stats.items()
                   if func == name and path.endswith(suffix))

    total = max(row[3] for row in stats.values())
    out = {"start": total - cumulative("streamanon/cli/anonymize.py", "cmd_anonymize")}
    for step, functions in STEPS:
        out[step] = sum(cumulative(*f) for f in functions)
    out["rest"] = total - sum(out.values())
    out["total (profiled)"] = total
    out["imports (within the above)"] = sum(
        row[3] for (path, _, func), row in stats.items()
        if func == "_find_and_load" and "importlib._bootstrap" in path)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.bench_pipeline",
        description="anonymize on real surveys, step by step, in this checkout and another")
    parser.add_argument("--surveys", default="military",
                        help=f"comma-separated, of {', '.join(SURVEYS)} (default military)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--before", default=None, metavar="DIR",
                        help="another checkout (an earlier commit) to run beside this one")
    parser.add_argument("--repeat", type=int, default=3,
                        help="whole-process runs per checkout and survey (median shown)")
    args = parser.parse_args(argv)
    names = args.surveys.split(",")
    unknown = sorted(set(names) - set(SURVEYS))
    if unknown:
        parser.error(f"unknown survey(s) {', '.join(unknown)}; known: {', '.join(SURVEYS)}")
    sides = {"after": ROOT}
    if args.before:
        sides = {"before": Path(args.before).resolve(), "after": ROOT}
        if not (sides["before"] / "streamanon").is_dir():
            parser.error(f"{args.before} is not a streamanon checkout")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    revisions = {side: commit(path) for side, path in sides.items()}
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            csv = Path(tmp) / f"{name}.csv"
            load(name).to_csv(csv, index=False)
            schema = SCHEMAS / f"{name}.toml"
            for side, checkout in sides.items():  # load the kernels and the files once
                whole(checkout, command(csv, schema, args.k, Path(tmp) / f"{side}.csv"))
            times: dict[str, list[float]] = {side: [] for side in sides}
            for i in range(args.repeat):
                for side, checkout in sides.items():
                    print(f"{name}, {side}, run {i + 1} of {args.repeat} ...", flush=True)
                    times[side].append(whole(checkout, command(
                        csv, schema, args.k, Path(tmp) / f"{side}.csv")))
            for side, checkout in sides.items():
                out = Path(tmp) / f"{side}.csv"
                split = steps(checkout, command(csv, schema, args.k, out),
                              Path(tmp) / f"{side}.prof")
                report = json.loads(out.with_name(out.stem + ".report.json").read_text())
                results.setdefault(name, {})[side] = {
                    "seconds": statistics.median(times[side]), "runs": times[side],
                    "steps": split, "il": report["information_loss"],
                    "cells": report["cells"]}
    print(f"\n`streamanon anonymize`, k = {args.k}; {started}; {machine()}; "
          + ", ".join(f"{side} {rev}" for side, rev in revisions.items())
          + f"; command: python -m simulations.bench_pipeline --surveys {args.surveys} "
          f"--k {args.k} --repeat {args.repeat}" + (" --before DIR" if args.before else "")
          + "\n")
    print(table(results, list(sides)))
    return 0


def table(results: dict[str, dict[str, Any]], sides: list[str]) -> str:
    """Per survey: the whole process (median) and each step, per side; the loss of each."""
    head = "| survey | step | " + " | ".join(sides) + " |"
    lines = [head, "|---|---|" + "---:|" * len(sides)]
    for name, by_side in results.items():
        n = len(next(iter(by_side.values()))["runs"])
        lines.append(f"| {name} | whole process (median of {n}) | " + " | ".join(
            f"**{by_side[s]['seconds']:.2f} s**" for s in sides) + " |")
        for step in next(iter(by_side.values()))["steps"]:
            lines.append(f"| | {step} | " + " | ".join(
                f"{by_side[s]['steps'][step]:.2f} s" for s in sides) + " |")
        lines.append("| | information loss, cells | " + " | ".join(
            f"{by_side[s]['il']:.4f} %, {by_side[s]['cells']:,}" for s in sides) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
