"""Attack-based disclosure risk of a release: singling out, linkability and attribute inference,
measured by anonymeter (Giomi, Boenisch, Wehmeyer & Tasnádi, "A Unified Framework for
Quantifying Privacy Risk in Synthetic Data", PoPETs 2023), against a **control** set.

Each attack is run twice with the release as the intruder's only source: on the records the
release was made from (``original``) and on ``control``, records of the same population that
were **not** released. Part of any attack's success comes from what the release tells about
the population at large (a release that is useful does that); only the excess over the control
is what it gives away about the respondents in it. anonymeter's risk is that excess,
``(success on original - success on control) / (1 - success on control)``, with a Wilson
confidence interval (``CONFIDENCE``). Without records that were never released there is no
control: microaggregation releases every record, so :func:`holdout_attack_risk` holds out a
random share and measures a release made the same way from the rest.

- **singling out**: the intruder writes predicates on the key from the released tuples (up to
  ``SINGLING_OUT_COLUMNS`` attributes, e.g. ``age >= 87 and region == north``) that match one
  released tuple; the success is the share that matches exactly one original record.
- **linkability**: the key is split in two halves, as two data sets an intruder holds; a
  record's halves are linked when both have the same nearest released record (Gower distance).
- **attribute inference**: from a record's key, the intruder guesses its secret (each
  sensitive attribute, or without one the first ``MAX_SECRETS`` confidential ones) as that of
  the nearest released record; a guess is right when equal (a ``float`` secret: within 5 %).

The key is what :func:`streamanon.mixed.encoding_for` codes: numbers and ordinal ranks as
numbers, categories and booleans as labels, a missing value as a value of its own. Pure:
tables in, numbers out; anonymeter draws its targets with NumPy's global generator, which is
seeded for the call and restored after, so a measurement repeats.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from streamanon.errors import InputError, ParameterError
from streamanon.mixed import encoding_for
from streamanon.schema import Schema

#: Targets of each attack (on the original and on the control): anonymeter's default. With
#: 500 the 95 % interval of a success rate is at most +-0.044 wide.
N_ATTACKS = 500
#: Fewer control records than this, and the attacks are not run: 200 targets give a success
#: rate within +-0.07 (95 %), the widest interval worth reading.
MIN_CONTROL = 200
#: The share of the records held out as the control when no control is given.
HOLDOUT_SHARE = 0.2
#: At most this many records are drawn (uniformly, fixed seed) for a held-out measurement: the
#: release is made again from them, which for a million records would take minutes.
MAX_RECORDS = 10_000
CONFIDENCE = 0.95
#: Attributes of a singling-out predicate (anonymeter's default) and the candidate predicates
#: tried, at most: a k-anonymous release has few tuples that one predicate isolates.
SINGLING_OUT_COLUMNS = 3
SINGLING_OUT_ATTEMPTS = 10_000
MAX_SECRETS = 3
#: What the page says the attacks mean, one sentence each.
MEANINGS = {
    "singling_out": "the share of predicates an intruder writes from the release (such as "
                    "'age >= 87 and region = north') that isolate exactly one respondent, "
                    "beyond what they isolate among people who are not in the survey",
    "linkability": "the share of respondents whose record, cut into two halves held by two "
                   "data sets, an intruder joins again through the release, beyond people who "
                   "are not in the survey",
    "inference": "how much better than for people who are not in the survey an intruder "
                 "who knows a respondent's key guesses their answer from the nearest "
                 "released record",
}
INSTALL = "pip install 'streamanon[risk]'"


@dataclass(frozen=True)
class Risk:
    """One attack's risk (0 to 1) and its confidence interval, with the success rates it
    comes from (``control`` None without a control)."""

    value: float
    low: float
    high: float
    attack_rate: float
    control_rate: float | None
    baseline_rate: float


@dataclass(frozen=True)
class AttackRisks:
    """What :func:`attack_risk` found; ``reason`` says why nothing was measured."""

    measured: bool
    reason: str | None = None
    control: str = ""
    n_original: int = 0
    n_release: int = 0
    n_control: int = 0
    n_attacks: int = 0
    confidence: float = CONFIDENCE
    singling_out: Risk | None = None
    linkability: Risk | None = None
    inference: dict[str, Risk] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in (
            "measured", "reason", "control", "n_original", "n_release", "n_control",
            "n_attacks", "confidence")}
        out["singling_out"] = None if self.singling_out is None else vars(self.singling_out)
        out["linkability"] = None if self.linkability is None else vars(self.linkability)
        out["inference"] = {name: vars(r).copy() for name, r in self.inference.items()}
        out["notes"] = list(self.notes)
        return out


def not_measured(reason: str, **context: Any) -> AttackRisks:
    return AttackRisks(measured=False, reason=reason, **context)


def attack_risk(original: pd.DataFrame, release: pd.DataFrame, control: pd.DataFrame,
                schema: Schema, *, secrets: Sequence[str] | None = None,
                n_attacks: int = N_ATTACKS, confidence: float = CONFIDENCE, seed: int = 0,
                control_text: str = "") -> AttackRisks:
    """The three attacks on ``release``, made from ``original``, with ``control`` records
    (same columns) that were not released.

    Parameters
    ----------
    original, release, control
        The tables; the key is the schema's quasi-identifiers.
    schema
        Roles and types.
    secrets
        The attributes attribute inference guesses; default the schema's sensitive fields,
        else its first ``MAX_SECRETS`` confidential fields in the release that are not text
        or timestamps.
    n_attacks
        Targets of each attack, at most the number of control (and original) records.
    confidence
        Of the intervals.
    seed
        Of anonymeter's draws.
    control_text
        What the control is, in words, for the report.

    Returns
    -------
    AttackRisks
        Not measured (with the reason) when anonymeter is not installed or the control has
        fewer than ``MIN_CONTROL`` records.

    Raises
    ------
    InputError
        A key column or a secret missing from a table.
    ParameterError
        ``n_attacks`` below 1, ``confidence`` outside (0, 1).
    """
    if n_attacks < 1:
        raise ParameterError(f"n_attacks must be at least 1, got {n_attacks}")
    if not 0 < confidence < 1:
        raise ParameterError(f"confidence must be between 0 and 1, got {confidence}")
    sizes = {"n_original": len(original), "n_release": len(release),
             "n_control": len(control), "control": control_text}
    evaluators = _anonymeter()
    if evaluators is None:
        return not_measured(f"anonymeter is not installed ({INSTALL})", **sizes)
    if len(control) < MIN_CONTROL or len(original) < MIN_CONTROL:
        which, n = (("control", len(control)) if len(control) < MIN_CONTROL
                    else ("original", len(original)))
        return not_measured(f"{n:,} {which} records, at least {MIN_CONTROL:,} needed", **sizes)
    key = list(schema.quasi_identifiers)
    secrets = _secrets(schema, release) if secrets is None else list(secrets)
    for name, table in (("original", original), ("release", release), ("control", control)):
        absent = [c for c in (*key, *secrets) if c not in table.columns]
        if absent:
            raise InputError(f"the {name} table has no column(s) {', '.join(absent)}")
    ori, syn, ctl = (_attack_frame(t, schema, original, key, secrets)
                     for t in (original, release, control))
    n = min(n_attacks, len(ctl), len(ori))
    so, link, inference, notes = _evaluate(evaluators, ori, syn, ctl, key, secrets, schema, n,
                                           confidence, seed)
    return AttackRisks(measured=True, n_attacks=n, confidence=confidence, singling_out=so,
                       linkability=link, inference=inference, notes=notes, **sizes)


def holdout_attack_risk(original: pd.DataFrame, schema: Schema, k: int,
                        release: Callable[[pd.DataFrame], pd.DataFrame], *,
                        share: float = HOLDOUT_SHARE, max_records: int = MAX_RECORDS,
                        seed: int = 0, **options: Any) -> AttackRisks:
    """The attacks with a held-out control: of ``original`` (at most ``max_records`` of it,
    drawn uniformly), a random ``share`` is the control and ``release`` (the caller's way of
    releasing, e.g. :func:`streamanon.microaggregate` with the release's engine, k, l and t)
    makes a release of the rest, which is attacked. The risk is then that of a release made
    the same way from these records, not of the published one (which holds every record and
    so leaves none to compare with). ``options`` go to :func:`attack_risk`.

    Not measured, with the reason, below ``ceil(MIN_CONTROL / share)`` records."""
    if not 0 < share < 1:
        raise ParameterError(f"the held-out share must be between 0 and 1, got {share}")
    needed = math.ceil(MIN_CONTROL / share)
    n = len(original)
    text = (f"{100 * share:g} % of {min(n, max_records):,} records held out, never released; "
            f"the attacks target a release made the same way (k = {k}) from the other "
            f"{100 * (1 - share):g} %")
    if n > max_records:
        text = f"a uniform sample of {max_records:,} of the {n:,} records: " + text
    if n < needed:
        return not_measured(f"{n:,} records, at least {needed:,} needed", n_original=n,
                            control=text)
    if _anonymeter() is None:
        return not_measured(f"anonymeter is not installed ({INSTALL})", n_original=n,
                            control=text)
    rng = np.random.default_rng(seed)
    rows = rng.permutation(n)[:max_records]
    held = max(MIN_CONTROL, round(share * len(rows)))
    control = original.iloc[np.sort(rows[:held])].reset_index(drop=True)
    rest = original.iloc[np.sort(rows[held:])].reset_index(drop=True)
    return attack_risk(rest, release(rest), control, schema, seed=seed, control_text=text,
                       **options)


# --- anonymeter ------------------------------------------------------------------------------


def _anonymeter() -> tuple[Any, Any, Any] | None:
    """anonymeter's three evaluators, or None when it is not installed (an optional extra)."""
    try:
        from anonymeter.evaluators import (
            InferenceEvaluator,
            LinkabilityEvaluator,
            SinglingOutEvaluator,
        )
    except ImportError:
        return None
    _cache_kernels()
    return SinglingOutEvaluator, LinkabilityEvaluator, InferenceEvaluator


def _cache_kernels() -> None:
    """anonymeter's two distance kernels (numba, ``jit`` without ``cache``) recompiled with
    numba's cache, once per process: compiled at the first run on a machine, then loaded
    (about 5 s saved at each process's first attack)."""
    from anonymeter.neighbors import mixed_types_kneighbors as kneighbors
    from numba import njit

    if getattr(kneighbors, "_streamanon_cached", False):
        return
    for name in ("gower_distance", "_nearest_neighbors"):  # the callee first
        kernel = getattr(kneighbors, name)
        setattr(kneighbors, name, njit(cache=True, nogil=True)(kernel.py_func))
    kneighbors._streamanon_cached = True


def _evaluate(evaluators: tuple[Any, Any, Any], ori: pd.DataFrame, syn: pd.DataFrame,
              ctl: pd.DataFrame, key: list[str], secrets: list[str], schema: Schema, n: int,
              confidence: float, seed: int
              ) -> tuple[Risk, Risk | None, dict[str, Risk], list[str]]:
    singling, linking, inferring = evaluators
    notes: list[str] = []
    with _seeded(seed), _quiet(), warnings.catch_warnings():
        # anonymeter warns when an attack does no better than guessing: the page says so
        warnings.simplefilter("ignore")
        so = singling(ori=ori[key], syn=syn[key], control=ctl[key], n_attacks=n,
                      n_cols=min(SINGLING_OUT_COLUMNS, len(key)),
                      max_attempts=SINGLING_OUT_ATTEMPTS, seed=seed)
        so.evaluate(mode="multivariate")
        singling_out = _risk(so.results(confidence_level=confidence))
        linkability = None
        if len(key) >= 2:
            # the halves alternate along the key; the release's distinct tuples, so that a
            # half's nearest record is its cell, not one of the cell's identical copies
            tuples = syn[key].drop_duplicates(ignore_index=True)
            lk = linking(ori=ori[key], syn=tuples, control=ctl[key], n_attacks=n,
                         aux_cols=(key[0::2], key[1::2]), n_neighbors=1)
            lk.evaluate(n_jobs=1)
            linkability = _risk(lk.results(confidence_level=confidence))
        else:
            notes.append("linkability: not measured, the key has one attribute")
        inference = {}
        for secret in secrets:
            columns = [*key, secret]
            ev = inferring(ori=ori[columns], syn=syn[columns], control=ctl[columns],
                           aux_cols=key, secret=secret, n_attacks=n,
                           regression=schema.fields[secret].type == "float")
            ev.evaluate(n_jobs=1)
            inference[secret] = _risk(ev.results(confidence_level=confidence))
    return singling_out, linkability, inference, notes


def _risk(results: Any) -> Risk:
    risk = results.risk()
    control = results.control_rate
    return Risk(value=float(risk.value), low=float(risk.ci[0]), high=float(risk.ci[1]),
                attack_rate=float(results.attack_rate.value),
                control_rate=None if control is None else float(control.value),
                baseline_rate=float(results.baseline_rate.value))


@contextmanager
def _quiet() -> Iterator[None]:
    """anonymeter's own warnings held back (a singling-out search that ends before it found
    every predicate asked: those count as failed attacks, as anonymeter counts them)."""
    logger = logging.getLogger("anonymeter")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """NumPy's global generator seeded (anonymeter draws its targets from it), then restored."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


# --- tables ----------------------------------------------------------------------------------


def _secrets(schema: Schema, release: pd.DataFrame) -> list[str]:
    sensitive = [name for name in schema.sensitive if name in release.columns]
    if sensitive:
        return sensitive
    return [name for name in schema.names("confidential")
            if name in release.columns
            and schema.fields[name].type not in ("text", "str", "timestamp")][:MAX_SECRETS]


def _attack_frame(table: pd.DataFrame, schema: Schema, original: pd.DataFrame,
                  key: list[str], secrets: list[str]) -> pd.DataFrame:
    """The key and the secrets as anonymeter compares them: numbers and ordinal ranks as
    floats, categories and booleans as labels (a missing value a label of its own), coded as
    the original codes them, so all three tables share one coding."""
    encoding = encoding_for(original, schema)
    codes = encoding.codes(table[encoding.names])
    columns: dict[str, Any] = {}
    for j, col in enumerate(encoding.columns):
        if col.nominal:
            columns[col.name] = _labels(codes[:, j])
        else:
            columns[col.name] = codes[:, j]
    for name in secrets:
        spec = schema.fields[name]
        values = table[name]
        if spec.type == "float":
            columns[name] = pd.to_numeric(values, errors="coerce").to_numpy(
                dtype=np.float64, na_value=np.nan)
        else:
            columns[name] = np.array(["(missing)" if pd.isna(v) else str(v) for v in values],
                                     dtype=object)
    return pd.DataFrame({name: columns[name] for name in [*key, *secrets]})


def _labels(codes: np.ndarray) -> np.ndarray:
    return np.array(["(missing)" if np.isnan(c) else f"level {int(c)}" for c in codes],
                    dtype=object)
