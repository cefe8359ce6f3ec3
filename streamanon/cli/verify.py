"""``streamanon verify``: is a released file k-anonymous on its quasi-identifiers?"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from streamanon.cli._args import columns, positive_int, share
from streamanon.errors import InputError, ParameterError

if TYPE_CHECKING:
    import pandas as pd

    from streamanon.schema import Schema

EXIT_CHECK_FAILED = 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``verify``."""
    ve = sub.add_parser(
        "verify",
        help="check that a released file is k-anonymous",
        description=(
            "Group the rows of FILE by their quasi-identifier tuple; the file is k-anonymous "
            "when every distinct tuple occurs at least k times. Values are compared exactly "
            "(numbers, text and categories alike); a missing value counts as one value of its "
            "own, equal to every other missing value of the same column. The quasi-identifiers "
            "are --qi, or the schema's (--schema); with --l or --t, l-diversity and "
            "t-closeness are checked on the sensitive answers (the schema's sensitive = true "
            "fields and --sensitive). Exit status 0 if the file passes every check, 1 if not, "
            "with one line per failed check."
        ),
    )
    ve.add_argument("file", metavar="FILE", help="released file (.csv or .parquet)")
    ve.add_argument("--k", type=positive_int, required=True, help="required minimum group size")
    ve.add_argument("--qi", type=columns, default=None, metavar="COLS",
                    help="comma-separated quasi-identifier columns (default with --schema: "
                         "the schema's quasi-identifiers)")
    ve.add_argument("--original", metavar="FILE", default=None,
                    help="the raw file the release was made from (.csv or .parquet); also "
                         "report the share of sample uniques on the same columns before and "
                         "after")
    ve.add_argument("--sensitive", type=columns, default=[], metavar="COLS",
                    help="sensitive answers, besides the schema's sensitive = true fields: "
                         "report l (fewest distinct answers in a group) and "
                         "t (largest Earth Mover's Distance of a group's answers to the whole "
                         "file's; ordered for numbers, equal for text) of each")
    ve.add_argument("--schema", metavar="FILE", default=None,
                    help="the schema the release was made with: its quasi-identifiers are the "
                         "key (unless --qi is given), its sensitive = true fields are checked "
                         "for l and t, and an ordinal sensitive answer is measured with the "
                         "ordered distance in its levels' order (without it, text answers are "
                         "compared with the equal distance)")
    ve.add_argument("--l", type=positive_int, default=None, metavar="L",
                    help="also require distinct l-diversity L on every sensitive column")
    ve.add_argument("--t", type=share, default=None, metavar="T",
                    help="also require t-closeness T on every sensitive column")
    ve.set_defaults(handler=cmd_verify)


def _read_with_columns(path: str, qi: list[str]) -> pd.DataFrame:
    from streamanon.io import read_table

    frame = read_table(path)
    missing = [c for c in qi if c not in frame.columns]
    if missing:
        raise InputError(
            f"unknown column(s): {', '.join(missing)}; {path} has: "
            f"{', '.join(map(str, frame.columns))}"
        )
    return frame


def cmd_verify(args: argparse.Namespace) -> int:
    from streamanon.metrics import check_table_k_anonymity, sample_unique_share
    from streamanon.schema import Schema, load_schema

    schema = load_schema(args.schema) if args.schema else Schema(fields={})
    qi = args.qi or schema.quasi_identifiers
    if not qi:
        raise ParameterError("name the key: --qi COLS, or --schema FILE (the schema's "
                             "quasi-identifiers)")
    sensitive = schema.sensitive + [c for c in args.sensitive if c not in schema.sensitive]
    if (args.l is not None or args.t is not None) and not sensitive:
        raise InputError("--l and --t are checked on sensitive columns: name them with "
                         "--sensitive, or mark them sensitive = true in the schema")
    release = _read_with_columns(args.file, qi + sensitive)
    original = _read_with_columns(args.original, qi) if args.original else None
    report = check_table_k_anonymity(release, qi, args.k)
    if report.ok:
        print(
            f"{args.file}: {args.k}-anonymous ({report.n_records} records, {report.n_groups} "
            f"quasi-identifier groups, smallest {report.smallest_group})"
        )
    else:
        reason = (
            f"only {report.n_records} records"
            if report.n_records < args.k
            else f"{report.groups_below_k} of {report.n_groups} quasi-identifier groups "
            f"({report.records_below_k} of {report.n_records} records) occur fewer than "
            f"{args.k} times, smallest {report.smallest_group}"
        )
        print(f"{args.file}: NOT {args.k}-anonymous: {reason}", file=sys.stderr)
    if original is not None:
        before = sample_unique_share(original, qi)
        after = sample_unique_share(release, qi)
        print(f"sample uniques: {100 * before:.1f} % before, {100 * after:.1f} % after")
    private = _check_sensitive(release, args, schema, qi, sensitive) if sensitive else True
    return 0 if report.ok and private else EXIT_CHECK_FAILED


def _check_sensitive(release: pd.DataFrame, args: argparse.Namespace, schema: Schema,
                     qi: list[str], sensitive: list[str]) -> bool:
    """Print l and t of each sensitive column over the file's key groups; whether they meet
    --l and --t."""
    from streamanon.errors import KAnonymityError
    from streamanon.mixed import sensitive_codes
    from streamanon.release import Privacy, key_groups

    S, kinds = sensitive_codes(release, schema, sensitive)
    privacy = Privacy(tuple(sensitive), S, kinds, args.l, args.t)
    try:
        achieved = privacy.gate(release, qi)
        ok = True
    except KAnonymityError as exc:
        achieved = privacy.achieved(key_groups(release, qi))
        print(f"{args.file}: {exc}", file=sys.stderr)
        ok = False
    for name, got in achieved.items():
        print(f"{name}: l = {got['l']}, t = {got['t']:.3f} ({got['kind']} distance)")
    return ok
