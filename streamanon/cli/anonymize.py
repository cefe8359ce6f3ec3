"""One-shot microaggregation of files: ``anonymize``, ``engines``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamanon.cli._args import columns, param, positive_int, share
from streamanon.cli.dp_release import add_arguments as add_dp_arguments
from streamanon.cli.dp_release import check as check_dp
from streamanon.cli.dp_release import check_unused
from streamanon.cli.dp_release import run as run_dp
from streamanon.errors import InputError, ParameterError

if TYPE_CHECKING:
    from streamanon.progress import Progress

EXIT_CHECK_FAILED = 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``anonymize`` and ``engines``."""
    an = sub.add_parser(
        "anonymize",
        help="microaggregate a CSV, Parquet, SPSS or Stata file into a k-anonymous release",
        description=(
            "Replace the quasi-identifiers of every record by the mean of a cell of at least k "
            "similar records (original units), keep confidential columns unchanged, drop "
            "identifiers, shuffle the rows, and write the release atomically together with a "
            "JSON report OUTPUT_STEM.report.json. Describe the data with --schema FILE (a TOML "
            "file with a [schema] table: each column's role and type, as in the service's "
            "[surveys.schema]; categorical, ordinal, integer, boolean and missing values, a "
            "weight, strata), or for all-numeric data with the quick form --qi/--confidential/"
            "--drop. Every column of the input must have a role, so that no identifier slips "
            "through by accident. With --schema every value is first checked against its "
            "field's type, levels and min/max, as the service checks a response: a value "
            "outside them is refused (see --out-of-bounds)."
        ),
    )
    an.add_argument("input", metavar="INPUT",
                    help="input file (.csv, .parquet, .sav or .dta; SPSS and Stata value "
                         "labels are read as the values)")
    an.add_argument("--k", type=positive_int, required=True, help="minimum cell size")
    an.add_argument("--schema", metavar="FILE",
                    help="TOML schema file ([schema] table, optional strata = [...]); "
                         "replaces --qi/--confidential/--drop")
    an.add_argument("--qi", type=columns, default=None, metavar="COLS",
                    help="quick form: comma-separated numeric quasi-identifier columns")
    an.add_argument("--confidential", type=columns, default=[], metavar="COLS",
                    help="comma-separated columns published unchanged")
    an.add_argument("--drop", type=columns, default=[], metavar="COLS",
                    help="comma-separated columns removed from the release (identifiers)")
    an.add_argument("--missing", choices=("group", "impute"), default=None,
                    help="quick form: what a missing quasi-identifier value becomes: 'group' "
                         "(kept missing, microaggregated with records missing the same fields) "
                         "or 'impute' (its cell's value); default: an error")
    an.add_argument("--out-of-bounds", choices=("refuse", "drop", "clip"), default=None,
                    help="with --schema: what a value outside its field's min/max, levels or "
                         "type does (the values the service dead-letters): 'refuse' (default: "
                         "an error naming the column, the count and the first rows), 'drop' "
                         "(its row is left out) or 'clip' (a number is moved to the bound it "
                         "crosses; anything else is refused); counted in the report")
    an.add_argument("--strata", type=columns, default=[], metavar="COLS",
                    help="microaggregate within each stratum of these columns (strata under k "
                         "records join the most similar one, reported)")
    an.add_argument("--weight", metavar="COL", default=None,
                    help="quick form: sampling-weight column (weighted cell means and losses; "
                         "published unchanged)")
    an.add_argument("--sensitive", type=columns, default=[], metavar="COLS",
                    help="sensitive confidential answers (besides those the schema marks "
                         "sensitive = true): l and t are checked on them")
    an.add_argument("--l", type=positive_int, default=None, metavar="L",
                    help="distinct l-diversity: every cell holds at least L different answers "
                         "of each sensitive column")
    an.add_argument("--t", type=share, default=None, metavar="T",
                    help="t-closeness: each cell's distribution of each sensitive answer is "
                         "within Earth Mover's Distance T (0-1) of the whole release's")
    an.add_argument("--engine", default=None,
                    help="microaggregation engine (default mdav, or tclose_kfirst with --l or "
                         "--t: it takes l and t on several sensitive columns, and runs "
                         "compiled with --t alone; see 'streamanon engines')")
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
    an.add_argument("--cluster", metavar="WHERE", default=None,
                    help="partitioned run (engine 'partitioned'): cut the records with "
                         "Mondrian-V median cuts into parts of at most --part-size records "
                         "and microaggregate each part with --engine on its own, on the "
                         "workers of a Dask cluster (without --engine: MDAV and six rounds "
                         "of ONA*'s local search on each part, which keeps the loss near "
                         "exact MDAV's on all the records). WHERE is a scheduler address "
                         "tcp://HOST:8786 (start it with 'dask scheduler', and workers with "
                         "'dask worker tcp://HOST:8786' on each machine; workers need only "
                         "'pip install streamanon', the same version), 'local-N' (start N "
                         "worker processes on this machine for the run) or 'local' (the parts "
                         "one after the other in this process). The release is the same "
                         "wherever the parts run. An unreachable scheduler, or one without "
                         "workers, is an error after 10 s; a worker lost mid-run has its "
                         "parts run again elsewhere")
    an.add_argument("--part-size", type=positive_int, default=None, metavar="N",
                    help="largest part of a partitioned run, in records (default 100,000, "
                         "where a part takes seconds; larger parts lose less information "
                         "and take longer); without --cluster the parts run one after the "
                         "other in this process")
    an.add_argument("--out", required=True, metavar="OUTPUT",
                    help="release file: .csv, .parquet (with --schema, categories and "
                         "ordinals are dictionary-encoded: factors in R, categoricals in "
                         "pandas), .sav (SPSS) or .dta (Stata); in .sav and .dta every "
                         "variable is labelled with its field's description (else its name), "
                         "and categories and ordinals are codes 1 to L with value labels (an "
                         "ordinal's codes in its order); names are made valid (letters, digits, "
                         "_; at most 64 bytes in SPSS, 32 in Stata). The report goes next to "
                         "it unless --report says where")
    an.add_argument("--report", default=None, metavar="FILE",
                    help="the JSON report (default: OUTPUT_STEM.report.json beside the "
                         "release). Its measures are computed on the raw answers: it is for "
                         "you, the data holder; put it apart from the folder you publish")
    add_dp_arguments(an)
    an.add_argument("--seed", type=int, default=None,
                    help="seed of the row shuffle (default: fresh randomness)")
    an.add_argument("--no-progress", action="store_true",
                    help="show no progress (default: a bar on a terminal; when standard error "
                         "is a file or a pipe, a line every 10 s: phase, records done of the "
                         "total, rate; STREAMANON_PROGRESS_SECONDS sets the interval)")
    an.set_defaults(handler=cmd_anonymize)

    en = sub.add_parser("engines", help="list the microaggregation engines",
                        description="List every registered engine with its source and parameters.")
    en.set_defaults(handler=cmd_engines)



def cmd_anonymize(args: argparse.Namespace) -> int:
    from streamanon.cli._progress import shown
    from streamanon.io import same_file, table_format
    from streamanon.progress import Progress
    from streamanon.schema import load_schema

    table_format(args.out)
    if args.epsilon is not None:
        check_dp(args)
    else:
        check_unused(args)
    if same_file(args.input, args.out):
        raise InputError(f"--out {args.out} is the input file; the release would overwrite "
                         "the raw data: choose another output")
    if args.report is not None and (same_file(args.report, args.out)
                                    or same_file(args.report, args.input)):
        raise InputError(f"--report {args.report} is the input or the release file: give the "
                         "report a file of its own")
    quick = {"qi": args.qi, "confidential": args.confidential, "drop": args.drop,
             "missing": args.missing, "weight": args.weight}
    if args.schema is not None:
        given = [f"--{name}" for name, value in quick.items() if value]
        if given:
            raise ParameterError(f"{', '.join(given)} and --schema: the schema gives every "
                                 "column's role; use one or the other")
        described: dict[str, Any] = {"schema": load_schema(args.schema)}
    elif args.out_of_bounds is not None:
        raise ParameterError("--out-of-bounds needs --schema: the bounds, levels and types "
                             "are the schema's")
    elif args.qi is None:
        raise ParameterError("describe the data: --schema FILE, or --qi COLS (quick form for "
                             "numeric data)")
    else:
        described = quick
    progress = Progress()
    with shown(progress, f"anonymize k={args.k}", not args.no_progress):
        return _anonymize(args, described, progress)


def _report_file(args: argparse.Namespace) -> Path:
    """Where the report goes: ``--report``, else OUTPUT_STEM.report.json beside the release."""
    from streamanon.io import report_path

    return Path(args.report) if args.report is not None else report_path(args.out)


def _anonymize(args: argparse.Namespace, described: dict[str, Any], progress: Progress) -> int:
    from streamanon.api import BeyondK, Output, TwoStage, default_engine, microaggregate
    from streamanon.cluster import check_cluster, part_runner
    from streamanon.io import read_table, table_format, write_json, write_table

    progress.enter(f"read {args.input}")
    frame = read_table(args.input)
    if table_format(args.out) in (".sav", ".dta"):  # before the run, not after it
        from streamanon.spss_stata import variable_names

        dropped = described["schema"].dropped if args.schema is not None else args.drop
        variable_names([c for c in map(str, frame.columns) if c not in dropped],
                       table_format(args.out))
    outside = None
    if args.schema is None:
        _check_roles(frame, args)
    else:
        progress.enter("check every value against the schema")
        frame, outside = _within_schema(frame, described["schema"],
                                        args.out_of_bounds or "refuse", args)
    if args.epsilon is not None:
        table, report, line = run_dp(args, frame, described["schema"], progress, outside)
        progress.enter(f"write {args.out}")
        write_table(table, args.out, schema=described["schema"])
        rpath = _report_file(args)
        write_json(report, rpath)
        print(f"wrote {args.out}: {line}\nreport {rpath}")
        for warning in report["differential_privacy"]["warnings"]:
            print(f"streamanon: warning: {warning}", file=sys.stderr)
        return 0
    params = dict(args.param)
    if (args.incremental is None) != (args.nu is None):
        raise ParameterError("--incremental and --nu go together")
    if args.compare_one_shot and args.incremental is None:
        raise ParameterError("--compare-one-shot needs --incremental and --nu")
    two_stage = None
    if args.incremental is not None:
        two_stage = TwoStage(incremental=args.incremental, nu=args.nu,
                             incremental_params=dict(args.incremental_param),
                             compare_one_shot=args.compare_one_shot)
    privacy = BeyondK(sensitive=args.sensitive, l=args.l, t=args.t)
    engine_named = args.engine is not None or bool(params)
    if args.engine is None:
        args.engine = default_engine(privacy)
    engine_name = args.engine
    where = None
    if args.cluster is not None or args.part_size is not None:
        args.engine, params = _partitioned(args, params, engine_named)
        where = "local" if args.cluster is None else check_cluster(args.cluster)
        engine_name = f"{params['engine']} in parts of {params['part_size']:,} ({where})"
    started = time.perf_counter()
    with part_runner(where or "local") as runner:
        if runner is not None:
            params["runner"] = runner
        result = microaggregate(frame, args.k, args.engine, **described,
                                strata=args.strata, privacy=privacy, two_stage=two_stage,
                                output=Output(seed=args.seed), progress=progress,
                                engine_params=params)
    report = result.report()
    if where is not None:
        report["cluster"] = where
    report["confidential"] = [c for c, spec in report["columns"].items()
                              if spec["role"] in ("confidential", "label")]
    report["input"] = str(args.input)
    report["output"] = str(args.out)
    report["total_seconds"] = time.perf_counter() - started
    if outside is not None:
        report["outside_schema"] = outside
    for warning in _publication_warnings(frame, report["columns"]):
        print(f"streamanon: warning: {warning}", file=sys.stderr)
    progress.enter(f"write {args.out}")
    write_table(result.data, args.out, schema=described.get("schema"))
    rpath = _report_file(args)
    write_json(report, rpath)
    if args.incremental is None and args.engine != "partitioned":
        _record_timing(result)  # a partitioned run's time depends on its parts and workers
    stages = engine_name if args.incremental is None else (
        f"{engine_name} on {report['n_0']} + {args.incremental} on {report['n_plus']}")
    print(
        f"wrote {args.out}: {result.n} records, {report['cells']} cells of {args.k}+ "
        f"({stages}), IL = {result.information_loss:.2f}%, {result.seconds:.2f} s; "
        f"report {rpath}"
    )
    for name, got in ((report.get("privacy") or {}).get("sensitive") or {}).items():
        print(f"{name}: l = {got['l']}, t = {got['t']:.3f} ({got['kind']} distance)")
    if report.get("delta") is not None:
        print(f"two-stage vs one-shot: delta = {100 * report['delta']:+.2f} %, "
              f"tau_0 = {report['tau_0']:.3f}, tau_+ = {report['tau_plus']:.3f}")
    return 0


#: Rows named in a refusal, per column.
SHOWN_ROWS = 5


def _within_schema(frame: Any, schema: Any, policy: str,
                   args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """``frame`` without values outside the schema (:func:`streamanon.schema.violations`):
    refused, their rows dropped, or numbers clipped to their bounds; and what was done, for
    the report (counts per column and reason, no values)."""
    import numpy as np
    import pandas as pd

    from streamanon.schema import violations

    found = violations(frame, schema)
    counts: dict[str, dict[str, int]] = {}
    for v in found:
        counts.setdefault(v.column, {})
        counts[v.column][v.reason] = counts[v.column].get(v.reason, 0) + len(v.rows)
    outside = {"policy": policy, "rows_dropped": 0, "values_clipped": 0, "columns": counts}
    if not found:
        return frame, outside
    csv = str(args.input).lower().endswith(".csv")
    if policy == "refuse":
        raise InputError(_outside_text(found, args, csv) + "; fix the data or the schema, or "
                         "pass --out-of-bounds drop (leave those rows out) or clip (move a "
                         "number to the bound it crosses)")
    if policy == "drop":
        rows = np.unique(np.concatenate([v.rows for v in found]))
        frame = frame.drop(index=frame.index[rows]).reset_index(drop=True)
        outside["rows_dropped"] = int(rows.size)
        done = f"dropped {rows.size:,} of {rows.size + len(frame):,} rows"
    else:
        frame = frame.copy()
        for v in found:
            if v.reason == "out_of_bounds":
                outside["values_clipped"] += _clip(frame, v.column, schema.fields[v.column],
                                                   v.rows)
        left = violations(frame, schema)
        if left:
            raise InputError(_outside_text(left, args, csv) + "; --out-of-bounds clip moves a "
                             "number to its bound and cannot fix these: fix them, or pass "
                             "--out-of-bounds drop (leave those rows out)")
        done = f"clipped {outside['values_clipped']:,} values to their bounds"
    for name, spec in schema.fields.items():  # numbers read as text next to a dropped word
        if (name in frame.columns and frame[name].dtype == object
                and (spec.type in ("int", "float")
                     or (spec.type is None and spec.role in ("quasi_identifier", "weight")))):
            frame[name] = pd.to_numeric(frame[name])
    per_column = ", ".join(f"{name}: {n:,} {reason}" for name, by in counts.items()
                           for reason, n in by.items())
    print(f"streamanon: warning: {done} outside the schema ({per_column}); counted in the "
          "report (outside_schema)", file=sys.stderr)
    return frame, outside


def _clip(frame: Any, name: str, spec: Any, rows: Any) -> int:
    """Move the values of ``name`` at ``rows`` to the bounds they cross (an integer field's
    to the nearest integer inside); how many changed."""
    import math

    import numpy as np
    import pandas as pd

    integer = spec.type == "int"
    lo = None if spec.min is None else (math.ceil(spec.min) if integer else spec.min)
    hi = None if spec.max is None else (math.floor(spec.max) if integer else spec.max)
    if lo is None and hi is None:
        return 0
    before = pd.to_numeric(frame[name].iloc[rows]).to_numpy(dtype=np.float64)
    after = np.clip(before, -np.inf if lo is None else lo, np.inf if hi is None else hi)
    column = frame[name]
    if integer and pd.api.types.is_integer_dtype(column):
        column.iloc[rows] = after.astype(column.dtype)
    else:
        column = column.astype(object if column.dtype == object else np.float64)
        column.iloc[rows] = after
    frame[name] = column
    return int(np.sum(after != before))


def _outside_text(found: list[Any], args: argparse.Namespace, csv: bool) -> str:
    """The values outside the schema in one line: per column the count, what the schema
    asks and the first rows (numbered from 1; in a CSV file, after the header)."""
    where = "data rows" if csv else "rows"
    parts = []
    for v in found:
        shown = ", ".join(str(int(r) + 1) for r in v.rows[:SHOWN_ROWS])
        more = ", ..." if len(v.rows) > SHOWN_ROWS else ""
        parts.append(f"{v.column}: {len(v.rows):,} value(s) {v.detail} ({where} "
                     f"{shown}{more})")
    counted = " (data row 1 is the line after the header)" if csv else ""
    return (f"{args.input} breaks the schema {args.schema}{counted}: " + "; ".join(parts))


def _partitioned(args: argparse.Namespace, params: dict[str, Any],
                 engine_named: bool) -> tuple[str, dict[str, Any]]:
    """The engine ``partitioned`` wrapping ``--engine``: its name and parameters (where the
    parts run is the ``runner`` that :func:`streamanon.cluster.part_runner` gives). With no
    engine named (and no l or t asked) the parts run the default part engine
    (:data:`streamanon.engines.partitioned.DEFAULT_PART_ENGINE`)."""
    from streamanon.engines.partitioned import (
        DEFAULT_PART_ENGINE,
        DEFAULT_PART_PARAMS,
        DEFAULT_PART_SIZE,
    )

    engine = args.engine
    if not engine_named and args.l is None and args.t is None:
        engine, params = DEFAULT_PART_ENGINE, dict(DEFAULT_PART_PARAMS)
    return "partitioned", {"engine": engine, "engine_params": params,
                           "part_size": args.part_size or DEFAULT_PART_SIZE}


def _check_roles(frame: Any, args: argparse.Namespace) -> None:
    """The quick form's roles: each column named once, every column named."""
    columns = [str(c) for c in frame.columns]
    roles: dict[str, str] = {}
    named = (("qi", args.qi), ("confidential", args.confidential), ("drop", args.drop),
             ("weight", [args.weight] if args.weight else []))
    for role, cols in named:
        for c in cols:
            if c in roles:
                raise InputError(f"column {c!r} is given two roles: --{roles[c]} and --{role}")
            roles[c] = role
    unknown = [c for c in [*roles, *args.strata] if c not in columns]
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


def _publication_warnings(frame: Any, columns: dict[str, dict[str, Any]]) -> list[str]:
    """Columns published unchanged that can identify a respondent by themselves: timestamps
    (declared, or datetime values) and free text (declared, or strings mostly unique)."""
    import pandas as pd

    out = []
    for name, spec in columns.items():
        if spec["role"] not in ("confidential", "label") or name not in frame.columns:
            continue
        column = frame[name]
        kind = spec.get("type")
        if (kind == "timestamp" or pd.api.types.is_datetime64_any_dtype(column)
                or (kind in (None, "str") and _timestamps(column))):
            out.append(f"confidential column {name} is a timestamp, published unchanged: a "
                       "submission time can identify a respondent; drop or coarsen it")
        elif kind == "text" or (kind in (None, "str") and _free_text(column)):
            out.append(f"confidential column {name} is free text, published unchanged: it may "
                       "name or describe a respondent; drop it or review it by hand")
    return out


def _timestamps(column: Any) -> bool:
    """Strings that all read as dates and times (ISO 8601), judged on the first hundred."""
    import pandas as pd

    sample = column.dropna().iloc[:100]
    if sample.empty or not all(isinstance(v, str) and len(v) >= 10 for v in sample):
        return False
    parsed = pd.to_datetime(sample, errors="coerce", format="ISO8601", utc=True)
    return bool(parsed.notna().all())


def _free_text(column: Any) -> bool:
    """Strings, most of them different: free text rather than a coded answer."""
    import pandas as pd

    values = column.dropna()
    if values.empty or not (pd.api.types.is_object_dtype(values)
                            or pd.api.types.is_string_dtype(values)):
        return False
    if not all(isinstance(v, str) for v in values.iloc[:1000]):
        return False
    return values.nunique() > max(20, len(values) // 2)


def _record_timing(result: Any) -> None:
    """Add this run to the engine's cost model (what `plan` and the scheduler read)."""
    from scheduler.cost_model import CostModelStore
    from streamanon.engines import model_parameters

    store = CostModelStore()
    params = model_parameters(result.engine, result.params)  # columns and defaults left out
    try:
        store.observe(result.engine, result.m, result.k, result.n, result.seconds, params)
    except (OSError, ValueError) as exc:
        print(f"streamanon: warning: timing not recorded in {store.path}: {exc}",
              file=sys.stderr)


def cmd_engines(args: argparse.Namespace) -> int:
    from streamanon.engines import available_engines
    from streamanon.engines.partitioned import partitioned  # noqa: F401  (registers it)

    for info in available_engines():
        print(f"{info.name:<20} {info.summary}")
        print(f"{'':<20} source: {info.source}")
        for name, text in info.parameters.items():
            if name in info.runtime:  # a Python object, not a value to type
                print(f"{'':<20} {name} (Python only; on the command line --cluster): {text}")
                continue
            value = "COLUMN[,COLUMN...]" if name in info.per_record else "..."
            print(f"{'':<20} --param {name}={value}: {text}")
    return 0
