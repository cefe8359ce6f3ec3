"""``streamanon report``: an HTML page on a release's disclosure risk and utility."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from streamanon.cli._args import columns, positive_int, share
from streamanon.errors import InputError, StreamanonError

EXIT_CHECK_FAILED = 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``report``."""
    rp = sub.add_parser(
        "report",
        help="write an HTML report on a release's disclosure risk and utility",
        description=(
            "Compare RELEASE with the ORIGINAL it was made from on the schema's "
            "quasi-identifiers (the key) and write one self-contained HTML page: the settings, "
            "a verdict in plain words with a warning for every bad measure, the groups with "
            "the same key before and after (sample uniques, groups below k, smallest group), "
            "l-diversity and t-closeness of every sensitive attribute (the schema's fields "
            "with sensitive = true, and --sensitive), means, variances and correlations "
            "before and after, and each attribute's distribution before and after as a "
            "picture. The page shows aggregates only, never a record. The released file is "
            "shuffled, so measures that need the row-to-row link (record linkage, interval "
            "disclosure) cannot be taken here: they are read from the report.json that "
            "anonymize or the service wrote beside the release, measured before shuffling "
            "(RELEASE_STEM.report.json, or a service release's report.json in the reports folder "
            "beside its releases, when "
            "it has as many records and the same key), and the page says so; without one "
            "they are not measured. The engine, and l and t unless given, are read from the "
            "same report.json. "
            "With anonymeter installed (pip install 'streamanon[risk]'), the page also gives "
            "the singling-out, linkability and attribute-inference risks of anonymeter's "
            "attacks with 95 % intervals, measured against a control: records of the same "
            "population that were not released (--control FILE), else 20 % of ORIGINAL "
            "(at most 10,000 records, drawn at random) held out while a release is made the "
            "same way (same engine, k, l, t) from the rest; at least 200 control records, "
            "so 1,000 in ORIGINAL without --control. "
            "Exit status 0 if the release has no warning (k-anonymous, no sample unique, the "
            "l and t asked), 1 if it has one; the page is written either way."
        ),
    )
    rp.add_argument("original", metavar="ORIGINAL", help="raw file (.csv or .parquet)")
    rp.add_argument("release", metavar="RELEASE", help="released file (.csv or .parquet)")
    rp.add_argument("--schema", metavar="FILE", required=True,
                    help="the TOML schema the release was made with ([schema] table)")
    rp.add_argument("--k", type=positive_int, required=True,
                    help="the k the release must meet (smallest group with the same key)")
    rp.add_argument("--l", type=positive_int, default=None,
                    help="the l asked of every sensitive attribute (distinct l-diversity; default: "
                         "the release's, from its report.json)")
    rp.add_argument("--t", type=share, default=None,
                    help="the t asked of every sensitive attribute (t-closeness, 0 to 1; default: "
                         "the release's, from its report.json)")
    rp.add_argument("--sensitive", type=columns, default=[], metavar="COLS",
                    help="comma-separated sensitive columns, besides the schema's")
    rp.add_argument("--control", metavar="FILE", default=None,
                    help="records of the same population that are not in ORIGINAL and were "
                         "never released (.csv or .parquet, ORIGINAL's columns): anonymeter's "
                         "attacks then target RELEASE itself (default: hold out 20 %% of "
                         "ORIGINAL and attack a release made the same way from the rest)")
    rp.add_argument("--no-attacks", action="store_true",
                    help="leave out anonymeter's attacks (seconds on 10,000 records)")
    rp.add_argument("--no-progress", action="store_true",
                    help="show no progress (default: a bar on a terminal; when standard error "
                         "is a file or a pipe, a line every 10 s with the phase)")
    rp.add_argument("--out", metavar="FILE", default=None,
                    help="the page (default: RELEASE_STEM.report.html next to the release)")
    rp.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from streamanon.cli._progress import shown
    from streamanon.io import same_file
    from streamanon.progress import Progress
    from streamanon.schema import load_schema

    release_path = Path(args.release)
    out = Path(args.out) if args.out else release_path.with_name(
        release_path.stem + ".report.html")
    for given, what in ((args.original, "the original"), (args.release, "the release"),
                        (args.schema, "the schema"), (args.control, "the control")):
        if given is None:
            continue
        if same_file(given, out):
            raise InputError(f"--out {out} is {what} file; the report would overwrite it: "
                             "choose another output")
    schema = load_schema(args.schema)
    progress = Progress()
    with shown(progress, "report", not args.no_progress):
        return _report(args, schema, out, release_path, progress)


def _report(args: argparse.Namespace, schema: Any, out: Path, release_path: Path,
            progress: Any) -> int:
    from streamanon.io import atomic_write, read_table
    from streamanon.risk import measure
    from streamanon.risk_page import render, verdict

    progress.enter(f"read {args.original} and {args.release}")
    original = read_table(args.original)
    release = read_table(args.release)
    sensitive = [name for name, spec in schema.fields.items()
                 if getattr(spec, "sensitive", False)]
    sensitive += [name for name in args.sensitive if name not in sensitive]
    absent = [name for name in sensitive if name not in release.columns]
    if absent:
        raise InputError(f"sensitive column(s) {', '.join(absent)} are not in {args.release}; "
                         f"it has: {', '.join(map(str, release.columns))}")
    progress.enter("measure risk and utility")
    measures = measure(original, release, schema, args.k, aligned=False,
                       sensitive=sensitive).to_json()
    made, made_path, why = _release_report(release_path, len(release))
    privacy = made.get("privacy") or {}
    settings = {"k": args.k, "l": privacy.get("l") if args.l is None else args.l,
                "t": privacy.get("t") if args.t is None else args.t, "engine": _engine(made),
                "original": args.original, "release": args.release, "schema": args.schema,
                "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    private = made.get("differential_privacy")
    if private:  # drawn with --epsilon: its guarantee, in the report's own words
        from streamanon.dp import engine_name

        settings["engine"] = engine_name(private["mechanism"])
        settings["differential privacy"] = private["guarantee"]
    aligned, source = (_linkage(made, made_path, measures["key"]) if made_path
                       else (None, why))
    if aligned is None:
        linkage_line = f"record linkage and interval disclosure: not measured ({source})"
    else:
        measures["risk"]["record_linkage"] = aligned["record_linkage"]
        measures["risk"]["interval_disclosure"] = aligned["interval_disclosure"]
        settings["record linkage and interval disclosure"] = source
        linkage_line = (f"record linkage {_pct(aligned['record_linkage'])}, interval "
                        f"disclosure {_pct(aligned['interval_disclosure'])}: {source}")
    progress.enter("anonymeter's attacks")
    measures["attacks"] = _attacks(args, original, release, schema, sensitive, settings,
                                   made).to_json()
    progress.enter(f"draw {out}")
    page = render(measures, original, release, schema, settings)
    atomic_write(out, lambda tmp: Path(tmp).write_text(page, encoding="utf-8"))
    warnings = [s.text for s in verdict(measures, settings) if s.warning]
    after = measures["risk"]["after"]
    print(f"wrote {out}: smallest group {after['smallest_group']}, sample uniques "
          f"{100 * after['sample_uniques']:.1f} % (before "
          f"{100 * measures['risk']['before']['sample_uniques']:.1f} %), "
          f"{len(warnings)} warning(s)")
    print(linkage_line)
    print(_attacks_line(measures["attacks"]))
    for text in warnings:
        print(f"streamanon: warning: {text}", file=sys.stderr)
    return EXIT_CHECK_FAILED if warnings else 0


def _attacks(args: argparse.Namespace, original: Any, release: Any, schema: Any,
             sensitive: list[str], settings: dict[str, Any], made: dict[str, Any]) -> Any:
    """anonymeter's attacks: on RELEASE with --control, else on a release made the same way
    from ORIGINAL less a held-out control; not measured with --no-attacks."""
    from streamanon.attacks import attack_risk, holdout_attack_risk, not_measured
    from streamanon.io import read_table

    if args.no_attacks:
        return not_measured("--no-attacks was given")
    secrets = sensitive or None
    if args.control is not None:
        control = read_table(args.control)
        return attack_risk(original, release, control, schema, secrets=secrets,
                           control_text=f"the {len(control):,} records of {args.control}, "
                                        "not released")

    def made_again(rest: Any) -> Any:
        from streamanon import BeyondK, Output, dp, microaggregate

        private = made.get("differential_privacy")
        if private:  # drawn again as the release was (its budget: pure or zCDP; fresh noise)
            return dp.release_as(rest, schema, private).table
        return microaggregate(rest, args.k, made.get("engine"), schema=schema,
                              privacy=BeyondK(sensitive=sensitive, l=settings["l"],
                                              t=settings["t"]),
                              output=Output(risk=False, seed=0),
                              engine_params=made.get("params")).data

    try:
        return holdout_attack_risk(original, schema, args.k, made_again, secrets=secrets)
    except StreamanonError as exc:
        return not_measured(f"the release could not be made again from the records not held "
                            f"out: {exc}")


def _attacks_line(attacks: dict[str, Any]) -> str:
    if not attacks["measured"]:
        return f"attacks (anonymeter): not measured ({attacks['reason']})"
    parts = [f"{label} {_interval(attacks[key])}" for key, label in
             (("singling_out", "singling out"), ("linkability", "linkability"))
             if attacks[key] is not None]
    parts += [f"inference of {name} {_interval(r)}" for name, r in attacks["inference"].items()]
    return f"attacks (anonymeter): {', '.join(parts)}; control: {attacks['control']}"


def _interval(risk: dict[str, float]) -> str:
    return (f"{100 * risk['value']:.1f} % ({100 * risk['low']:.1f} to "
            f"{100 * risk['high']:.1f} %)")


def _release_report(release: Path, n: int) -> tuple[dict[str, Any], Path | None, str]:
    """The report.json written with the release: ``anonymize``'s RELEASE_STEM.report.json,
    else the service's report.json, in the default reports folder (``<output>/../reports/
    <survey>/``, ``[output] reports_directory``) or, from earlier versions, in the release's
    directory; with its path. ({}, None, why not) when there is none, or the one there is of
    another release (another number of records)."""
    from streamanon.io import report_path
    from streamanon.service.config import reports_beside

    own = report_path(release)
    survey = release.parent
    service = reports_beside(survey.parent) / survey.name / "report.json"
    for path in (own, service, release.with_name("report.json")):
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(report, dict):
            continue
        if report.get("n") != n:
            return {}, None, (f"the {path.name} beside it describes another release: "
                              f"{report.get('n')} records, this one has {n}")
        return report, path, ""
    return {}, None, (f"the released file is shuffled, and no {own.name} of anonymize (or "
                      "report.json of the service) is beside it")


def _linkage(report: dict[str, Any], path: Path, key: list[str]
             ) -> tuple[dict[str, float | None] | None, str]:
    """Record linkage and interval disclosure as the release's own report has them, measured
    before shuffling (row i of the release known to be record i), and where they came from;
    (None, why not) when the report has none on this key."""
    measured = report.get("risk") or {}
    aligned = measured.get("risk") or {}
    if report.get("differential_privacy") and not measured:
        return None, (f"{path.name} is of a differentially private release, drawn without "
                      "measuring which released row is which record")
    if measured.get("key") != key:
        return None, (f"{path.name} measured them on another key: "
                      f"{', '.join(measured.get('key') or []) or 'none'}")
    if aligned.get("record_linkage") is None and aligned.get("interval_disclosure") is None:
        return None, (f"{path.name} has no record linkage: its release was measured without "
                      "knowing which released row is which record")
    who = "the service" if "release_id" in report else "anonymize"
    return ({"record_linkage": aligned.get("record_linkage"),
             "interval_disclosure": aligned.get("interval_disclosure")},
            f"measured by {who} before shuffling, from {path.name}")


def _pct(share: float | None) -> str:
    return "not measured" if share is None else f"{100 * share:.1f} %"


def _engine(report: dict[str, Any]) -> str | None:
    """The engine of the release's report, with its incremental stage if it had one."""
    if "engine" not in report:
        return None
    engine = str(report["engine"])
    if report.get("incremental"):
        engine += f" + {report['incremental']} (nu = {report.get('nu')})"
    return engine
