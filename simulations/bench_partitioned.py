"""Partitioned base run on Dask: information loss against exact MDAV, time on 1 and 2 workers.

    python -m simulations.bench_partitioned                     # 1,000,000 x 15, k = 10
    python -m simulations.bench_partitioned --n 200000 --part-sizes 10000,50000,100000
    python -m simulations.bench_partitioned --part-sizes 100000 --part-rounds 0,3,4
    python -m simulations.bench_partitioned --n 10000000 --part-sizes 100000 --workers 2 \\
        --no-exact                                               # the 10 M run (a few min)

i.i.d. Gaussian records, standardised (paper 001's synthetic data). For each part size the
records are cut by Mondrian-V into parts of at most that many records and MDAV runs on each
part (``streamanon.engines.partitioned``), followed by ``--part-rounds`` rounds of ONA*'s local
search (``ona_star`` with ``start=mdav``; 0: MDAV alone), on a Dask ``LocalCluster`` of 1 and
of 2 single-threaded worker processes. Reported:

1. Information loss of the partitioned run and of exact MDAV on the same data, and the
   relative increase; the labels are the same on every cluster size (checked).
2. Wall time end to end (cut, send the parts, cluster, gather, join) per worker count, with
   the time of the Mondrian-V cut alone, the part engine on one part in this process with one
   numba thread (as on a worker), and each worker's peak memory (``max_rss_mb``).
3. A scale model at the part size closest to the default (100,000):
   ``T(N, W) = cut(N) + max(send(N), compute(N, W)) + part``, from the measured cut (scaled
   as ``N log N``, it runs on the client), the per-part cost (``ceil(parts / W)`` rounds of
   the part engine on a median part) and the cost of sending the records and their labels
   (per byte and per task, measured here over the loopback; the per-byte cost is at least
   that of ``--bandwidth-mb``, for a network), with the term that limits it named. The
   client also holds all of ``X`` (``8 m N`` bytes), stated with the prediction.

The default run (1,000,000 x 15, five part sizes, exact MDAV once, two cluster sizes) takes
some 10-15 minutes on a 2-core machine; ``--n`` and ``--part-sizes`` make it shorter. Timings
on a shared machine are noisy: medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import resource
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from simulations.common import clock, gaussian, seconds_cell

SCALE_N = (10_000_000, 50_000_000, 100_000_000)
SCALE_W = (4, 16, 64)


def _ints(text: str, least: int = 1) -> list[int]:
    """Comma-separated integers, each at least ``least``."""
    try:
        values = [int(float(v)) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") \
            from None
    if not values or min(values) < least:
        raise argparse.ArgumentTypeError(f"expected integers >= {least}, got {text!r}")
    return values


def _rounds(text: str) -> list[int]:
    return _ints(text, least=0)


def part_engine(rounds: int, candidates: int | None = None) -> tuple[str, dict[str, Any]]:
    """The engine run on each part: MDAV, then ``rounds`` rounds of ONA*'s local search with
    ``candidates`` cells per record (None: ``ona_star``'s default)."""
    if rounds == 0:
        return "mdav", {}
    params: dict[str, Any] = {"start": "mdav", "max_rounds": rounds}
    if candidates is not None:
        params["candidates"] = candidates
    return "ona_star", params


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.splitlines()[1:]))
    p.add_argument("--n", type=int, default=1_000_000, help="records (default 1,000,000)")
    p.add_argument("--m", type=int, default=15, help="quasi-identifiers (default 15)")
    p.add_argument("--k", type=int, default=10, help="minimum cell size (default 10)")
    p.add_argument("--part-sizes", type=_ints, default=[10_000, 50_000, 100_000, 200_000,
                                                         500_000],
                   help="comma-separated part sizes (default 10000,50000,100000,200000,500000)")
    p.add_argument("--workers", type=_ints, default=[1, 2],
                   help="LocalCluster sizes to time, worker processes (default 1,2)")
    p.add_argument("--part-rounds", type=_rounds, default=[0],
                   help="comma-separated local-search rounds after MDAV on each part: 0 = MDAV "
                        "alone, R > 0 = ona_star with start=mdav, max_rounds=R (default 0)")
    p.add_argument("--part-candidates", type=int, default=None,
                   help="cells a record may move to in those rounds (ona_star's candidates; "
                        "default: ona_star's, 64 on parts of over 20,000 records at k = 10)")
    p.add_argument("--no-exact", action="store_true",
                   help="skip exact MDAV on all records (hours at 10 M); IL then absolute only")
    p.add_argument("--repeat", type=int, default=1, help="timed runs per setting (median)")
    p.add_argument("--bandwidth-mb", type=float, default=1000.0,
                   help="network bandwidth of the scale model, MB/s (default 1000: 10 GbE); "
                        "the loopback measured here is shown too")
    p.add_argument("--refine", type=_ints, default=[],
                   help="also refine each part size's labels (streamanon.refine, on all the "
                        "records, in this process) for these cumulative budgets in seconds, "
                        "e.g. 60,240; the IL after each (default: none)")
    p.add_argument("--seed", type=int, default=19)
    p.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    return p


def max_rss_mb() -> float:
    """This process's peak resident memory, MB: ``VmHWM`` of ``/proc/self/status`` where there
    is one, else ``ru_maxrss`` (Linux reports kB).

    Not ``ru_maxrss`` on Linux: a worker process is forked from the client and then runs
    ``exec``, and Linux keeps the forked copy's resident size (the client's, all the records
    included) in ``ru_maxrss`` across the ``exec``; a worker then reports the client's peak, not
    its own. ``VmHWM`` is the peak of the process's own memory since its ``exec``."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> None:
    """Start this process's ``VmHWM`` again from its current resident size (Linux: ``5`` to
    ``/proc/self/clear_refs``); elsewhere the peak stays the process's."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _labels_for(array: np.ndarray) -> np.ndarray:
    """What a worker sends back for a part, without clustering it: the transfer alone."""
    return np.zeros(len(array), dtype=np.int64)


def measure_transfer(client: Any, X: np.ndarray, part_size: int) -> tuple[float, float]:
    """Seconds per task (one-row parts) and seconds per byte (parts of ``part_size`` records,
    up to 400 MB, their per-task costs included) to send parts to the workers and labels
    back."""
    from streamanon.cluster import dask_runner

    def timed(parts: list[np.ndarray]) -> float:
        started = time.perf_counter()
        for _ in dask_runner(client)(_labels_for, parts):
            pass
        return time.perf_counter() - started

    tiny = [X[i:i + 1] for i in range(50)]
    per_task = timed(tiny) / len(tiny)
    count = max(2, min(len(X) // part_size, 400_000_000 // (8 * X.shape[1] * part_size)))
    big = [X[i * part_size:(i + 1) * part_size] for i in range(count)]
    sent = sum(a.nbytes + 8 * len(a) for a in big)
    # per byte with the per-task cost of the large parts left in (subtracting the small
    # parts' per-task time, itself noisy, could leave nothing): an upper bound
    return per_task, timed(big) / sent


def run(args: argparse.Namespace) -> dict[str, Any]:
    from streamanon.cluster import dask_runner, one_thread, open_client
    from streamanon.engines import run_engine
    from streamanon.engines.partitioned import cut_parts, partitioned_labels
    from streamanon.metrics import information_loss

    X = gaussian(args.n, args.m, args.seed)
    for r in args.part_rounds:  # compile / load the kernels
        engine, params = part_engine(r, args.part_candidates)
        run_engine(engine, X[: 4 * args.k], args.k, **params)
    out: dict[str, Any] = {"n": args.n, "m": args.m, "k": args.k, "rows": [], "timings": []}
    if not args.no_exact:
        started = time.perf_counter()
        exact = run_engine("mdav", X, args.k)
        out["exact_seconds"] = time.perf_counter() - started
        out["exact_il"] = information_loss(X, exact)
        del exact
        print(f"  exact MDAV: {clock(out['exact_seconds'])}", file=sys.stderr)
    cuts: dict[tuple[int, int], dict[str, Any]] = {}
    for p in args.part_sizes:
        started = time.perf_counter()
        parts = cut_parts(X, args.k, p)
        cut_seconds = time.perf_counter() - started
        median = sorted(parts, key=len)[len(parts) // 2]
        for r in args.part_rounds:
            engine, params = part_engine(r, args.part_candidates)
            started = time.perf_counter()
            one_thread(partial(run_engine, engine, k=args.k, **params), X[median])
            cuts[p, r] = {"part_size": p, "rounds": r, "parts": len(parts),
                          "median_part": len(median), "cut_seconds": cut_seconds,
                          "part_seconds": time.perf_counter() - started}
    labels_of: dict[tuple[int, int], np.ndarray] = {}
    for w in args.workers:
        with open_client(f"local-{w}") as client:
            if "seconds_per_byte" not in out:
                out["seconds_per_task"], out["seconds_per_byte"] = measure_transfer(
                    client, X, model_part_size(args))
            for (p, r) in cuts:
                engine, params = part_engine(r, args.part_candidates)
                client.run(reset_peak)  # each setting's own peak, not the run's so far
                times = []
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    labels = partitioned_labels(X, args.k, engine=engine, engine_params=params,
                                                part_size=p, runner=dask_runner(client))
                    times.append(time.perf_counter() - started)
                same = bool(np.array_equal(labels_of.setdefault((p, r), labels), labels))
                peaks = client.run(max_rss_mb)
                out["timings"].append({"part_size": p, "rounds": r, "workers": w,
                                       "seconds": statistics.median(times), "runs": times,
                                       "same_labels": same,
                                       "worker_peak_mb": max(peaks.values())})
                print(f"  part size {p:,}, {r} rounds, on {w} worker(s): "
                      f"{clock(statistics.median(times))}", file=sys.stderr)
    for key, cut in cuts.items():
        il = information_loss(X, labels_of[key])
        row = {**cut, "il": il}
        if "exact_il" in out:
            row["il_increase"] = il / out["exact_il"] - 1
        out["rows"].append(row)
    out["refined"] = refined(X, args, labels_of, out.get("exact_il"))
    out["client_peak_mb"] = max_rss_mb()
    out["model"] = scale_model(out, args)
    return out


def refined(X: np.ndarray, args: argparse.Namespace,
            labels_of: dict[tuple[int, int], np.ndarray],
            exact_il: float | None) -> list[dict[str, Any]]:
    """IL of each part size's labels after the anytime refinement (``--refine``): the
    budgets are cumulative, each refinement goes on from the state the one before left."""
    from streamanon.metrics import information_loss
    from streamanon.refine import refine_partition

    rows: list[dict[str, Any]] = []
    for (p, r), labels in labels_of.items():
        spent = 0.0
        for budget in sorted(args.refine):
            step = refine_partition(X, labels, args.k, budget_seconds=budget - spent)
            labels, spent = step.labels, spent + step.seconds
            il = information_loss(X, labels)
            rows.append({"part_size": p, "rounds": r, "budget": budget, "seconds": spent, "il": il,
                         "stopped": step.stopped,
                         "il_increase": None if exact_il is None else il / exact_il - 1})
            print(f"  part size {p:,}, {r} rounds, refined for {spent:.0f} s: IL {il:.3f} %",
                  file=sys.stderr)
            if step.stopped == "converged":
                break
    return rows


def model_part_size(args: argparse.Namespace) -> int:
    """The measured part size closest (in log) to the default, for the transfer and the model."""
    from streamanon.engines.partitioned import DEFAULT_PART_SIZE

    return min(args.part_sizes, key=lambda p: abs(math.log(p / DEFAULT_PART_SIZE)))


def scale_model(out: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Predicted end-to-end seconds for ``SCALE_N`` records on ``SCALE_W`` workers at the
    model's part size, from this run's measurements (see the module docstring)."""
    network = 1.0 / (args.bandwidth_mb * 1e6)
    per_byte = max(out["seconds_per_byte"], network)
    rows = []
    for cut in out["rows"]:
        p = cut["part_size"]
        if p != model_part_size(args):
            continue
        for N in SCALE_N:
            parts = cut["parts"] * N / out["n"]
            cut_s = cut["cut_seconds"] * (N * math.log(N)) / (out["n"] * math.log(out["n"]))
            send_s = N * (args.m + 1) * 8 * per_byte + parts * out["seconds_per_task"]
            for W in SCALE_W:
                compute_s = math.ceil(parts / W) * cut["part_seconds"]
                terms = {"partitioning pass": cut_s, "sending the parts": send_s,
                         "clustering on the workers": compute_s}
                total = cut_s + max(send_s, compute_s) + cut["part_seconds"]
                rows.append({"part_size": p, "rounds": cut["rounds"], "N": N, "W": W,
                             "seconds": total,
                             "limit": max(terms, key=terms.__getitem__), **terms,
                             "client_gb": N * args.m * 8 / 1e9})
    return rows


def report(out: dict[str, Any], args: argparse.Namespace) -> None:
    n, m, k = out["n"], out["m"], out["k"]
    print(f"\n### Partitioned runs, {n:,} x {m} i.i.d. Gaussian, k = {k}\n")
    candidates = "" if args.part_candidates is None else \
        f", candidates={args.part_candidates}"
    print("Rounds: the local-search rounds after MDAV on each part (0: MDAV alone; R: ona_star "
          f"with start=mdav, max_rounds=R{candidates}).\n")
    if "exact_il" in out:
        print(f"Exact MDAV: IL = {out['exact_il']:.3f} %, {seconds_cell(out['exact_seconds'])} s "
              "(in this process).\n")
    print("| part size | rounds | parts | IL % | IL vs exact MDAV | Mondrian-V cut s | "
          "one part s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in out["rows"]:
        vs = f"{100 * r['il_increase']:+.2f} %" if "il_increase" in r else "-"
        print(f"| {r['part_size']:,} | {r['rounds']} | {r['parts']:,} | {r['il']:.3f} | {vs} | "
              f"{seconds_cell(r['cut_seconds'])} | {seconds_cell(r['part_seconds'])} |")
    if out["refined"]:
        print("\nRefined afterwards (`--refine`: local search on all the records, this "
              "process, budgets cumulative):\n")
        print("| part size | rounds | refined for s | IL % | IL vs exact | stopped |")
        print("|---:|---:|---:|---:|---:|:---|")
        for r in out["refined"]:
            vs = "-" if r["il_increase"] is None else f"{100 * r['il_increase']:+.2f} %"
            print(f"| {r['part_size']:,} | {r['rounds']} | {seconds_cell(r['seconds'])} | "
                  f"{r['il']:.3f} | {vs} | "
                  f"{r['stopped']} |")
    print("\n| part size | rounds | workers | end to end s | speed-up vs exact | same labels | "
          "worker peak MB |")
    print("|---:|---:|---:|---:|---:|:---:|---:|")
    for t in out["timings"]:
        speed = (f"{out['exact_seconds'] / t['seconds']:.2f}x"
                 if "exact_seconds" in out else "-")
        print(f"| {t['part_size']:,} | {t['rounds']} | {t['workers']} | "
              f"{seconds_cell(t['seconds'])} | {speed} | "
              f"{'yes' if t['same_labels'] else 'NO'} | {t['worker_peak_mb']:.0f} |")
    print(f"\nClient (cut, send, join) peak memory: {out['client_peak_mb']:.0f} MB. "
          f"Sending parts to the workers and labels back over the loopback: "
          f"{1e-6 / max(out['seconds_per_byte'], 1e-12):.0f} MB/s, "
          f"{1e3 * out['seconds_per_task']:.1f} ms per task.")
    print(f"\n### Scale model (network {args.bandwidth_mb:g} MB/s; seconds)\n")
    print("| part size | rounds | records | workers | predicted | partitioning pass | sending | "
          "clustering | limit | X on the client |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|:---|---:|")
    for r in out["model"]:
        print(f"| {r['part_size']:,} | {r['rounds']} | {r['N'] / 1e6:g} M | {r['W']} | "
              f"{clock(r['seconds'])} | "
              f"{seconds_cell(r['partitioning pass'])} | {seconds_cell(r['sending the parts'])} | "
              f"{seconds_cell(r['clustering on the workers'])} | {r['limit']} | "
              f"{r['client_gb']:.1f} GB |")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = run(args)
    report(out, args)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2))
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
