"""A synthetic e-survey export (seeded): identifiers, quasi-identifiers, answers and weights.

    python -m simulations.survey_data                                   # 3,000 rows
    python -m simulations.survey_data --n 3000 --seed 0 --out survey.csv --schema schema.toml

The data look like what a survey tool exports, with the awkward parts of real data: two
identifiers to drop (``respondent_id``, ``email``); categorical and ordinal quasi-identifiers
with rare levels (``gender``: "non-binary" and "prefer not to say" about 1.5 % each); an income
that is log-normal, rises with education and age and is missing for exactly 12 % of the rows,
more often for high earners, the old and those who withheld their gender (not at random);
Likert answers ``q1``..``q5`` (nullable integers) driven by one latent attitude and skipped more
towards the end; free-text comments with commas, quotes, line breaks and accents, mostly
missing; submission times over two weeks, with an invitation and a reminder wave and a daily
rhythm; and design weights that differ by ``region``, the stratum.

``SURVEY_SCHEMA`` describes these columns in the project's schema format (field name to role,
type, levels, bounds, missing values) and ``write_schema_toml`` writes it with ``SURVEY_STRATA``
as a schema file: ``strata = [...]`` and a ``[schema]`` table.

The table is written as CSV or Parquet by the file's suffix; the schema goes beside it as
``NAME.schema.toml`` unless ``--schema`` names another file.
"""

from __future__ import annotations

import argparse
import math
import numbers
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulations.common import RESULTS, shown
from streamanon.errors import StreamanonError
from streamanon.io import atomic_write, table_format, write_table

GENDERS = ["female", "male", "non-binary", "prefer not to say"]
GENDER_SHARES = [0.495, 0.475, 0.015, 0.015]
REGIONS = ["capital", "north", "south", "east", "west"]
REGION_SHARES = [0.34, 0.25, 0.19, 0.14, 0.08]
#: A region's design weight before the non-response adjustment: the inverse of its sampling
#: fraction, so the regions that were sampled least (and answer least) weigh most.
REGION_WEIGHTS = [0.7, 0.9, 1.2, 1.6, 2.3]
EDUCATION = ["primary", "secondary", "tertiary"]
LIKERT = ["q1", "q2", "q3", "q4", "q5"]
#: Item non-response grows towards the end of the questionnaire.
LIKERT_MISSING = [0.02, 0.025, 0.03, 0.04, 0.05]
INCOME_MISSING = 0.12
#: The survey is open for two weeks from midnight of this day; the invitation goes out at
#: ``SENT_HOUR`` on the first day, the reminder at the same hour a week later.
OPENS = pd.Timestamp("2026-05-04T00:00:00Z")
DAYS_OPEN = 14
SENT_HOUR = 8
#: Relative submissions per hour of the day: quiet at night, peaks at lunch and in the evening.
HOURLY = np.array([1, 0.5, 0.3, 0.2, 0.2, 0.4, 1, 2, 3.5, 4, 4, 4.5, 5.5, 5, 4, 3.5, 3.5, 4,
                   5, 6, 6.5, 5.5, 3.5, 2])

SURVEY_SCHEMA: dict[str, dict[str, Any]] = {
    "respondent_id": {"role": "identifier", "type": "str"},
    "email": {"role": "identifier", "type": "str"},
    "submitted_at": {"role": "confidential", "type": "timestamp"},
    "age": {"role": "quasi_identifier", "type": "int", "min": 18, "max": 90},
    "gender": {"role": "quasi_identifier", "type": "category", "levels": GENDERS},
    "region": {"role": "quasi_identifier", "type": "category", "levels": REGIONS},
    "education": {"role": "quasi_identifier", "type": "ordinal", "levels": EDUCATION},
    "household_size": {"role": "quasi_identifier", "type": "int", "min": 1, "max": 8},
    "income": {"role": "quasi_identifier", "type": "float", "min": 0.0, "required": False,
               "missing": "group"},
    **{q: {"role": "confidential", "type": "int", "min": 1, "max": 5, "required": False}
       for q in LIKERT},
    "comment": {"role": "confidential", "type": "text", "required": False},
    "weight": {"role": "weight", "type": "float", "min": 0.5, "max": 3.0},
}
SURVEY_STRATA = ["region"]

_OPENERS = ["The survey was", "Overall the questionnaire was", "Honestly, it was",
            "I found the questions", "Questions were", "This one was", "For me it was"]
_JUDGEMENTS = ["too long", "clear", "a bit confusing", "easy to follow", "repetitive",
               "well designed", "far too personal", "fine", "interesting",
               "hard to answer on my phone", "shorter than last year's"]
_FOLLOW_UPS = ["", " Thanks!", " Please share the results.", " Question 3 was unclear.",
               ' What does "household" mean exactly?', " The income question is nobody's business.",
               " It took me {minutes} minutes.", ' I\'d like a "sometimes" option, e.g. for q4.',
               " Merci, très bien fait.", "\nPS: the link in the reminder e-mail didn't work.",
               " My {members}-person household doesn't fit the categories."]


def make_survey(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """``n`` survey responses drawn from ``seed``, one row each, in order of starting the survey.

    Columns and dtypes: ``respondent_id``, ``email``, ``submitted_at`` (ISO 8601, UTC),
    ``gender``, ``region``, ``education`` and ``comment`` strings (``comment`` missing or empty
    for many); ``age`` and ``household_size`` int64; ``income`` and ``weight`` float64 (income
    NaN for ``round(0.12 n)`` rows); ``q1``..``q5`` nullable ``Int64``.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = np.random.default_rng(seed)
    started = np.sort(_start_seconds(rng, n))
    duration = rng.lognormal(np.log(420), 0.5, n)
    submitted = np.minimum(started + duration, DAYS_OPEN * 86400 - 1)

    age = np.clip(np.rint(18 + rng.gamma(2.0, 12.0, n)), 18, 90).astype(np.int64)
    gender = rng.choice(len(GENDERS), n, p=GENDER_SHARES)
    region = rng.choice(len(REGIONS), n, p=REGION_SHARES)
    # The young are more often graduates, but under 23 few have finished a degree yet.
    education = np.digitize(rng.normal(0, 1, n) - 0.018 * (age - 45) - 1.2 * (age < 23),
                            [-0.95, 0.35])
    household = np.clip(1 + rng.poisson(0.9 + 0.9 * np.exp(-((age - 40) / 14) ** 2)), 1, 8)

    working_age = np.minimum(age, 65) - 18
    log_income = (9.6 + 0.35 * education + 0.045 * working_age - 0.0009 * working_age ** 2
                  - 0.35 * (age >= 67) + rng.normal(0, 0.55, n))
    income = np.round(np.exp(log_income), -1)
    propensity = 1 / (1 + np.exp(-(-2.2 + 0.8 * (log_income - log_income.mean()) / log_income.std()
                                   + 0.015 * (age - 45) + 1.5 * (gender == 3))))
    withheld = rng.choice(n, round(INCOME_MISSING * n), replace=False,
                          p=propensity / propensity.sum())
    income[withheld] = np.nan

    attitude = rng.normal(0, 1, n)
    likert = {}
    for q, shift, missing in zip(LIKERT, [0.3, 0.0, -0.2, 0.5, 0.1], LIKERT_MISSING,
                                 strict=True):
        answer = 1 + np.digitize(0.8 * attitude + 0.6 * rng.normal(0, 1, n) + shift,
                                 [-1.6, -0.7, 0.3, 1.2])
        likert[q] = pd.arrays.IntegerArray(answer.astype(np.int64), rng.random(n) < missing)

    weight = np.round(np.clip(np.asarray(REGION_WEIGHTS)[region] * rng.lognormal(0, 0.12, n),
                              0.5, 3.0), 4)
    ids = [f"R{i:06d}" for i in range(1, n + 1)]
    times = (OPENS + pd.to_timedelta(np.floor(submitted), unit="s")).strftime("%Y-%m-%dT%H:%M:%SZ")
    return pd.DataFrame({
        "respondent_id": ids,
        "email": [f"{rid.lower()}@example.org" for rid in ids],
        "submitted_at": list(times),
        "age": age,
        "gender": [GENDERS[g] for g in gender],
        "region": [REGIONS[r] for r in region],
        "education": [EDUCATION[e] for e in education],
        "household_size": household.astype(np.int64),
        "income": income,
        **likert,
        "comment": _comments(rng, household),
        "weight": weight,
    })


def _start_seconds(rng: np.random.Generator, n: int) -> np.ndarray:
    """When each respondent opened the survey, in seconds after ``OPENS``: a third answer the
    reminder, and the answers to each message thin out over the following days."""
    reminder = rng.random(n) < 0.35
    day = np.where(reminder, 7 + np.floor(rng.exponential(1.3, n)),
                   np.floor(rng.exponential(1.6, n)))
    day = np.minimum(day, DAYS_OPEN - 1)
    hour = rng.choice(24, n, p=HOURLY / HOURLY.sum())
    # Both messages go out at 08:00: on their day nobody answers them earlier.
    later = HOURLY[SENT_HOUR:] / HOURLY[SENT_HOUR:].sum()
    sent_today = (day == 0) | (reminder & (day == 7))
    hour = np.where(sent_today, SENT_HOUR + rng.choice(24 - SENT_HOUR, n, p=later), hour)
    return day * 86400 + (hour + rng.random(n)) * 3600


def _comments(rng: np.random.Generator, household: np.ndarray) -> list[str | None]:
    """Most respondents leave the box untouched (missing), a few clear it (empty); the rest
    write a sentence or two, nearly all different."""
    n = len(household)
    kind = rng.choice(3, n, p=[0.55, 0.05, 0.40])
    opener = rng.integers(len(_OPENERS), size=n)
    first = rng.integers(len(_JUDGEMENTS), size=n)
    second = rng.integers(-len(_JUDGEMENTS), len(_JUDGEMENTS), size=n)  # < 0: no second one
    follow_up = rng.integers(len(_FOLLOW_UPS), size=n)
    minutes = rng.integers(3, 46, size=n)
    comments: list[str | None] = []
    for i in range(n):
        if kind[i] < 2:
            comments.append(None if kind[i] == 0 else "")
            continue
        text = f"{_OPENERS[opener[i]]} {_JUDGEMENTS[first[i]]}"
        if second[i] >= 0 and second[i] != first[i]:
            text += f" and {_JUDGEMENTS[second[i]]}"
        text += "." + _FOLLOW_UPS[follow_up[i]].format(minutes=minutes[i],
                                                        members=household[i])
        comments.append(text)
    return comments


# -- schema as TOML ----------------------------------------------------------------------------


def write_schema_toml(path: str | os.PathLike[str],
                      schema: Mapping[str, Mapping[str, Any]] = SURVEY_SCHEMA,
                      strata: Sequence[str] = SURVEY_STRATA) -> None:
    """Write ``strata = [...]`` and a ``[schema]`` table, one inline table per field, as TOML
    that ``tomllib`` reads back to the same ``{"strata": ..., "schema": ...}``."""
    lines = ["# Survey schema: field name = { role, type, ... }; strata name the design strata.",
             f"strata = {_toml_value(list(strata))}", "", "[schema]"]
    lines += [f"{_toml_key(name)} = {_toml_value(dict(spec))}" for name, spec in schema.items()]
    text = "\n".join(lines) + "\n"
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f",
                 "\r": "\\r"}


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    return '"' + "".join(
        _TOML_ESCAPES.get(ch) or (f"\\u{ord(ch):04X}" if ord(ch) < 0x20 or ord(ch) == 0x7F
                                  else ch)
        for ch in text) + '"'


def _toml_key(key: str) -> str:
    # A bare key with a dot would be read as a dotted (nested) key, so anything else is quoted.
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(f"cannot write a {type(value).__name__} as TOML: {value!r}")


# -- command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=3000, help="number of responses (default 3000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", type=Path, default=RESULTS / "survey.csv",
                        help="the table, .csv or .parquet (default results/survey.csv)")
    parser.add_argument("--schema", type=Path, default=None,
                        help="the schema TOML (default: beside --out, as NAME.schema.toml)")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n must be at least 1, got {args.n}")
    try:
        table_format(args.out)
    except StreamanonError as exc:
        parser.error(str(exc))
    schema = args.schema or args.out.with_suffix(".schema.toml")
    for target in (args.out, schema):
        target.parent.mkdir(parents=True, exist_ok=True)
    frame = make_survey(args.n, args.seed)
    write_table(frame, args.out)
    write_schema_toml(schema)
    print(f"wrote {shown(args.out)} ({len(frame):,} responses, seed {args.seed}) and "
          f"{shown(schema)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
