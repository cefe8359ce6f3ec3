"""One-shot microaggregation of files: ``anonymize``, ``verify``, ``engines``."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from streamanon.cli._args import columns, param, positive_int
from streamanon.errors import InputError, ParameterError

T = TypeVar("T")

EXIT_CHECK_FAILED = 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``anonymize``, ``verify`` and ``engines``."""
    an = sub.add_parser(
        "anonymize",
        help="microaggregate a CSV or Parquet file into a k-anonymous release",
        description=(
            "Replace the quasi-identifiers of every record by the mean of a cell of at least k "
            "similar records (original units), keep confidential columns unchanged, drop "
            "identifiers, shuffle the rows, and write the release atomically together with a "
            "JSON report OUTPUT_STEM.report.json. Every column of the input must be named in "
            "--qi, --confidential or --drop, so that no identifier slips through by accident."
        ),
    )
    an.add_argument("input", metavar="INPUT", help="input file (.csv or .parquet)")
    an.add_argument("--k", type=positive_int, required=True, help="minimum cell size")
    an.add_argument("--qi", type=columns, required=True, metavar="COLS",
                    help="comma-separated numeric quasi-identifier columns")
    an.add_argument("--confidential", type=columns, default=[], metavar="COLS",
                    help="comma-separated columns published unchanged")
    an.add_argument("--drop", type=columns, default=[], metavar="COLS",
                    help="comma-separated columns removed from the release (identifiers)")
    an.add_argument("--engine", default="mdav",
                    help="microaggregation engine (default mdav; see 'streamanon engines')")
    an.add_argument("--param", type=param, action="append", default=[], metavar="NAME=VALUE",
                    help="engine parameter, repeatable")
    an.add_argument("--incremental", metavar="STAGE",
                    help="two-stage release: the first (1 - nu) of the rows (file order = "
                         "arrival order) go to the engine, the rest to this incremental stage "
                         "(two_stage, nn, nn_inertial, nn_split_mid, nn_split_end)")
    an.add_argument("--nu", type=float, default=None,
                    help="fraction of the rows left to the incremental stage (with --incremental)")
    an.add_argument("--incremental-param", type=param, action="append", default=[],
                    metavar="NAME=VALUE", help="incremental-stage parameter, repeatable")
    an.add_argument("--compare-one-shot", action="store_true",
                    help="also run the one-shot engine on all rows and report delta and "
                         "tau_0, tau_+ relative to it")
    an.add_argument("--out", required=True, metavar="OUTPUT",
                    help="release file (.csv or .parquet); the report goes next to it")
    an.add_argument("--seed", type=int, default=None,
                    help="seed of the row shuffle (default: fresh randomness)")
    an.add_argument("--no-progress", action="store_true", help="do not show a progress bar")
    an.set_defaults(handler=cmd_anonymize)

    ve = sub.add_parser(
        "verify",
        help="check that a released file is k-anonymous",
        description=(
            "Group the rows of FILE by their quasi-identifier tuple; the file is k-anonymous "
            "when every distinct tuple occurs at least k times. Exit status 0 if it is, 1 if not."
        ),
    )
    ve.add_argument("file", metavar="FILE", help="released file (.csv or .parquet)")
    ve.add_argument("--k", type=positive_int, required=True, help="required minimum group size")
    ve.add_argument("--qi", type=columns, required=True, metavar="COLS",
                    help="comma-separated quasi-identifier columns")
    ve.set_defaults(handler=cmd_verify)

    en = sub.add_parser("engines", help="list the microaggregation engines",
                        description="List every registered engine with its source and parameters.")
    en.set_defaults(handler=cmd_engines)



def _with_progress(label: str, run: Callable[[Any], T], enabled: bool) -> T:
    """Run ``run(progress)`` in a worker thread and show a bar on stderr while it works."""
    from streamanon.progress import Progress

    progress = Progress()
    if not enabled:
        return run(progress)
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = run(progress)
        except BaseException as exc:  # re-raised in the calling thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, daemon=True)
    with Bar(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
             TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task(label, total=None)
        worker.start()
        while worker.is_alive():
            worker.join(0.1)
            if progress.total:
                bar.update(task, total=progress.total, completed=progress.done)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def cmd_anonymize(args: argparse.Namespace) -> int:
    from streamanon.api import microaggregate
    from streamanon.io import read_table, report_path, table_format, write_json, write_table
    from streamanon.release import release_table

    table_format(args.out)
    frame = read_table(args.input)
    columns = [str(c) for c in frame.columns]
    roles: dict[str, str] = {}
    for role, cols in (("qi", args.qi), ("confidential", args.confidential), ("drop", args.drop)):
        for c in cols:
            if c in roles:
                raise InputError(f"column {c!r} is given two roles: --{roles[c]} and --{role}")
            roles[c] = role
    unknown = [c for c in roles if c not in columns]
    if unknown:
        raise InputError(
            f"unknown column(s): {', '.join(unknown)}; the file has: {', '.join(columns)}"
        )
    unassigned = [c for c in columns if c not in roles]
    if unassigned:
        raise InputError(
            f"column(s) {', '.join(unassigned)} have no role; name each in --qi, --confidential "
            "or --drop (identifiers must be dropped explicitly)"
        )
    params = dict(args.param)
    if (args.incremental is None) != (args.nu is None):
        raise ParameterError("--incremental and --nu go together")
    if args.compare_one_shot and args.incremental is None:
        raise ParameterError("--compare-one-shot needs --incremental and --nu")
    two_stage = {}
    if args.incremental is not None:
        two_stage = {"incremental": args.incremental, "nu": args.nu,
                     "incremental_params": dict(args.incremental_param),
                     "compare_one_shot": args.compare_one_shot}
    show = not args.no_progress and sys.stderr.isatty()
    started = time.perf_counter()
    result = _with_progress(
        f"{args.engine} k={args.k}",
        lambda progress: microaggregate(frame, args.k, args.engine, qi=args.qi, drop=args.drop,
                                        progress=progress, engine_params=params,
                                        **two_stage),
        show,
    )
    release = release_table(frame.drop(columns=args.drop), result.labels, args.qi, args.k,
                            args.seed)
    report = result.report()
    report["confidential"] = list(args.confidential)
    report["input"] = str(args.input)
    report["output"] = str(args.out)
    report["total_seconds"] = time.perf_counter() - started
    write_table(release.table, args.out)
    rpath = report_path(args.out)
    write_json(report, rpath)
    if args.incremental is None:
        _record_timing(result)
    stages = args.engine if args.incremental is None else (
        f"{args.engine} on {report['n_0']} + {args.incremental} on {report['n_plus']}")
    print(
        f"wrote {args.out}: {result.n} records, {report['cells']} cells of {args.k}+ "
        f"({stages}), IL = {result.information_loss:.2f}%, {result.seconds:.2f} s; "
        f"report {rpath}"
    )
    if report.get("delta") is not None:
        print(f"two-stage vs one-shot: delta = {100 * report['delta']:+.2f} %, "
              f"tau_0 = {report['tau_0']:.3f}, tau_+ = {report['tau_plus']:.3f}")
    return 0


def _record_timing(result: Any) -> None:
    """Add this run to the engine's cost model (what `plan` and the scheduler read)."""
    from scheduler.cost_model import CostModelStore

    store = CostModelStore()
    try:
        store.observe(result.engine, result.m, result.k, result.n, result.seconds)
    except (OSError, ValueError) as exc:
        print(f"streamanon: warning: timing not recorded in {store.path}: {exc}",
              file=sys.stderr)


def cmd_verify(args: argparse.Namespace) -> int:
    from streamanon.io import read_table
    from streamanon.metrics import check_k_anonymity

    frame = read_table(args.file)
    missing = [c for c in args.qi if c not in frame.columns]
    if missing:
        raise InputError(
            f"unknown column(s): {', '.join(missing)}; the file has: "
            f"{', '.join(map(str, frame.columns))}"
        )
    report = check_k_anonymity(frame[args.qi].to_numpy(), args.k)
    if report.ok:
        print(
            f"{args.file}: {args.k}-anonymous ({report.n_records} records, {report.n_groups} "
            f"quasi-identifier groups, smallest {report.smallest_group})"
        )
        return 0
    reason = (
        f"only {report.n_records} records"
        if report.n_records < args.k
        else f"{report.groups_below_k} of {report.n_groups} quasi-identifier groups "
        f"({report.records_below_k} records) occur fewer than {args.k} times, smallest "
        f"{report.smallest_group}"
    )
    print(f"{args.file}: NOT {args.k}-anonymous: {reason}", file=sys.stderr)
    return EXIT_CHECK_FAILED


def cmd_engines(args: argparse.Namespace) -> int:
    from streamanon.engines import available_engines

    for info in available_engines():
        print(f"{info.name:<20} {info.summary}")
        print(f"{'':<20} source: {info.source}")
        for name, text in info.parameters.items():
            value = "COLUMN[,COLUMN...]" if name in info.per_record else "..."
            print(f"{'':<20} --param {name}={value}: {text}")
    return 0


def run_cli(argv: list[str]) -> int:
    from streamanon.cli import main

    return main(argv)
