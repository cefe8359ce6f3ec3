"""``streamanon simulate``: an arrival profile through the real pipeline, compressed in time."""

from __future__ import annotations

import argparse

from streamanon.cli._args import duration, positive_float, positive_int
from streamanon.errors import StreamanonError


def register(sub: argparse._SubParsersAction) -> None:
    from scheduler.profiles import PROFILES

    si = sub.add_parser(
        "simulate",
        help="replay an arrival profile through the real pipeline on a compressed clock",
        description=(
            "Start the embedded broker and the service, produce N synthetic responses at the "
            "moments the arrival profile gives, let the live planner start the base run, close "
            "at the end of the survey and publish the release, exactly as in production. Every "
            "moment of the survey (arrivals, close, deadline) is divided by --speedup; compute "
            "times are real. Writes OUT/report.md (with arrivals.png), OUT/simulation.json and "
            "the release under OUT/sim/. --dry-run only plans."
        ),
    )
    si.add_argument("--profile", default="uniform", metavar="NAME|FILE.csv",
                    help=f"arrival profile: {', '.join(PROFILES)}, or a CSV of timestamps "
                         "(default uniform)")
    si.add_argument("--n", type=positive_int, default=20_000, help="responses (default 20000)")
    si.add_argument("--m", type=positive_int, default=15,
                    help="quasi-identifiers for --data gaussian (default 15)")
    si.add_argument("--k", type=positive_int, default=10, help="anonymity parameter (default 10)")
    si.add_argument("--survey-duration", type=duration, default=36_000.0, metavar="DURATION",
                    help="how long the survey is open in survey time, e.g. 10h (default 10h)")
    si.add_argument("--speedup", type=positive_float, default=600.0, metavar="X",
                    help="time compression: survey time / wall time (default 600)")
    si.add_argument("--deadline", type=duration, default=None, metavar="DURATION",
                    help="release deadline after close, in survey time (e.g. 1h); default: "
                         "the earliest release (nu*)")
    si.add_argument("--engine", default="mdav",
                    help="base engine (default mdav); auto: the planner chooses ONA* or MDAV "
                         "as the service does with engine = \"auto\"")
    si.add_argument("--incremental", default="auto",
                    help="incremental stage (default auto: the planner chooses NN-split-end "
                         "or 2MDAV, as the service does)")
    si.add_argument("--objective", default="balanced", choices=["balanced", "earliest"],
                    help="without a deadline: balanced (default; the earliest release whose "
                         "expected information loss is within --max-delta of the engine's "
                         "one-shot release) or earliest (the paper's nu*, whatever the loss)")
    si.add_argument("--max-delta", type=float, default=0.05, metavar="D",
                    help="the balanced objective's bound on the expected loss against the "
                         "one-shot release, as a fraction (default 0.05: +5 %%)")
    si.add_argument("--reference", default="compute", choices=["compute", "release"],
                    help="the one-shot comparison: compute (default; the engine on all "
                         "records, timed in this process) or release (the same records "
                         "released one-shot at close through the service: the same steps)")
    si.add_argument("--refine", default="off", metavar="off|auto|SECONDS",
                    help="anytime refinement after the incremental stage: off (default), auto "
                         "(the time the deadline leaves) or seconds")
    si.add_argument("--data", default="gaussian", metavar="gaussian|census-like|FILE",
                    help="synthetic Gaussian, census-like (13 columns), or a CSV whose numeric "
                         "columns are the quasi-identifiers (default gaussian)")
    si.add_argument("--out", default="simulation", help="output directory (./simulation)")
    si.add_argument("--seed", type=int, default=7, help="seed of data and arrivals (default 7)")
    si.add_argument("--dry-run", action="store_true",
                    help="only the planner and the cost-model prediction; produce nothing")
    si.add_argument("--http", default=None, metavar="HOST:PORT",
                    help="serve the dashboard here while it runs (default: a free port)")
    si.add_argument("--bootstrap", default=None, metavar="HOST:PORT[,...]",
                    help="run on the Kafka brokers there (Apache Kafka, say; plain text, new "
                         "topics and group for each run) instead of an embedded broker")
    si.add_argument("--log-level", default="warning",
                    choices=["debug", "info", "warning", "error"])
    si.set_defaults(handler=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    from streamanon.engines import get_engine
    from streamanon.incremental import get_stage
    from streamanon.refine import parse_refine
    from streamanon.service.logs import setup_logging
    from streamanon.simulation.simulate import run_simulation

    if args.engine != "auto":  # else the planner chooses (scheduler.choice)
        get_engine(args.engine)
    if args.incremental != "auto":
        get_stage(args.incremental)
    if not args.max_delta >= 0:
        raise StreamanonError("--max-delta must be at least 0")
    refine = parse_refine(args.refine)
    if args.n < 3 * args.k:
        raise StreamanonError(f"--n must be at least 3k = {3 * args.k}")
    setup_logging(args.log_level, "text")
    try:
        summary = run_simulation(
            profile=args.profile, n=args.n, m=args.m, k=args.k,
            survey_duration=args.survey_duration, speedup=args.speedup, deadline=args.deadline,
            engine=args.engine, incremental=args.incremental, data=args.data, out=args.out,
            dry_run=args.dry_run, seed=args.seed, http=args.http,
            progress=lambda message: print(message, flush=True), refine=refine,
            objective=args.objective, max_delta=args.max_delta, reference=args.reference,
            bootstrap=args.bootstrap)
    except ValueError as exc:
        raise StreamanonError(str(exc)) from None
    from pathlib import Path

    print()
    print((Path(args.out) / "report.md").read_text())
    print(f"report: {Path(args.out) / 'report.md'}; summary: {Path(args.out) / 'simulation.json'}")
    return 0 if summary.get("deadline_met") is not False else 1
