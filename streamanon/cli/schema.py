"""``streamanon schema from-xlsform``: a schema file from the XLSForm a survey is collected with."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streamanon.cli._args import columns


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``schema`` and its subcommand ``from-xlsform``."""
    schema = sub.add_parser(
        "schema", help="write a schema file from a survey's form",
        description="Write a schema file (the TOML that anonymize --schema and the service "
                    "read) from the form a survey platform collects with.")
    schema.set_defaults(handler=lambda args: _help(schema))
    forms = schema.add_subparsers(dest="schema_command", metavar="SUBCOMMAND")
    xls = forms.add_parser(
        "from-xlsform", help="from an XLSForm (KoboToolbox, ODK, SurveyCTO, Ona)",
        description=(
            "Read FORM (an XLSForm workbook, .xlsx or .xls, read with pyxform) and write its "
            "schema: one field per question, named by the path the platform sends "
            "(household/age for age in group household). integer -> int and decimal -> float "
            "(min and max from a constraint such as '. >= 0 and . <= 120'), select_one -> "
            "category with the choice names as levels, select_multiple -> one bool per choice "
            "named PATH/CHOICE, date, datetime, start, end -> timestamp, text -> text (never a "
            "quasi-identifier; warned). Notes, calculations, media, locations, device "
            "metadata and meta/instanceID are written with role ignore, each with the reason "
            "in a comment; labels in every language are kept as comments. A field no option "
            "names is confidential (published unchanged); an identifier is only one "
            "--identifier names. A repeat is refused unless --drop-repeats."),
    )
    xls.add_argument("form", metavar="FORM", help="the XLSForm workbook (.xlsx or .xls)")
    xls.add_argument("--qi", type=columns, required=True, metavar="FIELDS",
                     help="comma-separated quasi-identifiers, by path (a select_multiple's "
                          "name stands for all its choices)")
    xls.add_argument("--sensitive", type=columns, default=[], metavar="FIELDS",
                     help="confidential answers whose disclosure is limited beyond k "
                          "(sensitive = true: l-diversity and t-closeness are checked on them)")
    xls.add_argument("--weight", default=None, metavar="FIELD",
                     help="the sampling weight (an integer, decimal or calculate question)")
    xls.add_argument("--ordinal", type=columns, default=[], metavar="FIELDS",
                     help="select_one questions whose choices are in order (type ordinal, "
                          "levels in the choices sheet's order)")
    xls.add_argument("--identifier", type=columns, default=[], metavar="FIELDS",
                     help="identifiers: removed from the release (the service keeps only "
                          "their HMAC); e.g. meta/instanceID. Never guessed")
    xls.add_argument("--ignore", type=columns, default=[], metavar="FIELDS",
                     help="fields to leave out of the release (role ignore), e.g. free text")
    xls.add_argument("--drop-repeats", action="store_true",
                     help="leave repeats out (each is one ignored list) instead of refusing "
                          "the form: a release has one record per submission")
    xls.add_argument("--out", required=True, metavar="FILE", help="the schema file to write")
    xls.set_defaults(handler=cmd_from_xlsform)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def cmd_from_xlsform(args: argparse.Namespace) -> int:
    from streamanon.errors import InputError
    from streamanon.io import atomic_write
    from streamanon.schema import parse_schema
    from streamanon.xlsform import schema_from_xlsform, to_toml

    if Path(args.out).resolve() == Path(args.form).resolve():
        raise InputError(f"--out {args.out} names the form itself")
    schema = schema_from_xlsform(
        args.form, qi=args.qi, sensitive=args.sensitive, weight=args.weight,
        ordinal=args.ordinal, identifier=args.identifier, ignore=args.ignore,
        drop_repeats=args.drop_repeats)
    parse_schema(schema.fields(), source=f"schema of {args.form}")  # what anonymize will read
    text = to_toml(schema)
    atomic_write(args.out, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    for warning in schema.warnings:
        print(f"streamanon: warning: {warning}", file=sys.stderr)
    roles: dict[str, int] = {}
    for spec in schema.fields().values():
        roles[spec["role"]] = roles.get(spec["role"], 0) + 1
    print(f"wrote {args.out}: {len(schema.entries)} fields ("
          + ", ".join(f"{n} {role}" for role, n in sorted(roles.items())) + ")")
    return 0
