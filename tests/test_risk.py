"""Disclosure risk and utility of a release (issue 16, :mod:`streamanon.risk`): every measure on
small tables computed by hand, agreement with the plain oracles of ``tests/privacy_oracle.py``
on random mixed releases, and a run on 100,000
records."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from streamanon import Output, microaggregate
from streamanon.errors import InputError, ParameterError
from streamanon.metrics import check_table_k_anonymity, sample_unique_share
from streamanon.risk import measure
from streamanon.schema import parse_schema
from tests import privacy_oracle as oracle

LEVELS = ("none", "primary", "secondary", "tertiary")
OFTEN = ("never", "sometimes", "often")
REGIONS = ("north", "south", "east", "west")


def schema_of(**fields: dict[str, Any]):
    return parse_schema(fields)


QI = {"role": "quasi_identifier"}
CONF = {"role": "confidential"}


def one_column(original: list, release: list, **spec: Any):
    """A one-attribute original and release (numeric unless ``spec`` says)."""
    return (pd.DataFrame({"x": original}), pd.DataFrame({"x": release}),
            schema_of(x=QI | spec))


# --- groups ----------------------------------------------------------------------------------


def test_groups_before_and_after_by_hand():
    original = pd.DataFrame({"a": [1, 1, 2, 3, None, None], "b": ["u", "u", "v", "v", "v", "v"]})
    release = pd.DataFrame({"a": [1, 1, 2, 2, None, None], "b": ["u", "u", "v", "v", "v", "v"]})
    schema = schema_of(a=QI | {"required": False}, b=QI | {"type": "category"})
    risk = measure(original, release, schema, 2, aligned=True).to_json()["risk"]
    # before: (1,u) x2, (2,v), (3,v), (missing,v) x2
    assert risk["before"] == {"sample_uniques": 2 / 6, "records_in_groups_below_k": 2,
                              "smallest_group": 1, "groups": 4}
    assert risk["after"] == {"sample_uniques": 0.0, "records_in_groups_below_k": 0,
                             "smallest_group": 2, "groups": 3}


@pytest.mark.parametrize("seed", range(3))
def test_groups_agree_with_the_k_anonymity_check(seed):
    original, schema, key = survey(seed)
    release = microaggregate(original, 3, schema=schema, output=Output(shuffle=False)).data
    for table, side in ((original, "before"), (release, "after")):
        got = measure(original, release, schema, 4, aligned=True).to_json()["risk"][side]
        report = check_table_k_anonymity(table, key, 4)
        assert got == {"sample_uniques": sample_unique_share(table, key),
                       "records_in_groups_below_k": report.records_below_k,
                       "smallest_group": report.smallest_group, "groups": report.n_groups}


# --- record linkage --------------------------------------------------------------------------


def test_record_linkage_by_hand():
    # cells {0, 1, 8} -> 3 and {9, 10, 11} -> 10: 8 is nearer 10, the others link to their
    # own tuple of 3 records: 5 records x 1/3 out of 6
    original, release, schema = one_column([0, 1, 8, 9, 10, 11], [3, 3, 3, 10, 10, 10])
    assert measure(original, release, schema, 3, aligned=True).record_linkage == \
        pytest.approx(5 / 18)


def test_record_linkage_splits_ties_among_the_nearest_records():
    # a -> own "a" (2 records), b -> "a" and "c" equally near (4 records), c -> own "c"
    original, release, schema = one_column(["a", "b", "c", "c"], ["a", "a", "c", "c"],
                                           type="category")
    assert measure(original, release, schema, 2, aligned=True).record_linkage == \
        pytest.approx((1 / 2 + 1 / 4 + 1 / 2 + 1 / 2) / 4)


def test_record_linkage_links_every_record_of_an_unchanged_table_of_distinct_records():
    original, release, schema = one_column([1.0, 5.0, 2.0, 7.0], [1.0, 5.0, 2.0, 7.0])
    assert measure(original, release, schema, 1, aligned=True).record_linkage == 1.0


def test_record_linkage_uses_the_mixed_distance():
    # Standardised, age (sd 20) dominates income (sd 1000) no more: record 0 is 1 sd from
    # tuple A on income and 0.5 sd from tuple B on age, so it links to B, not its own A.
    original = pd.DataFrame({"income": [0.0, 0.0, 2000.0, 2000.0], "age": [30, 50, 70, 70]})
    release = pd.DataFrame({"income": [1000.0, 1000.0, 2000.0, 2000.0],
                            "age": [40, 40, 70, 70]})
    schema = schema_of(income=QI, age=QI | {"type": "int"})
    got = measure(original, release, schema, 2, aligned=True).record_linkage
    expected = oracle.dbrl(original, release, ["income", "age"])
    assert got == pytest.approx(expected)
    assert 0 < got < 1


# --- interval disclosure ---------------------------------------------------------------------


def test_interval_disclosure_by_hand():
    # range 100, p = 10: within 10 of the released value; the withheld value discloses nothing
    original, release, schema = one_column([0, 10, 20, 30, 40, 100, 50],
                                           [5, 5, 25, 25, 70, 70, None], required=False)
    got = measure(original, release, schema, 2, aligned=True)
    assert got.interval_disclosure == pytest.approx(4 / 7)
    wide = measure(original, release, schema, 2, aligned=True, interval_percent=30)
    assert wide.interval_disclosure == pytest.approx(6 / 7)


def test_interval_disclosure_is_about_numeric_attributes_only():
    original, release, schema = one_column(["a", "b"], ["a", "a"], type="category")
    assert measure(original, release, schema, 2, aligned=True).interval_disclosure is None


# --- l and t ---------------------------------------------------------------------------------


def test_l_and_t_by_hand():
    frame = pd.DataFrame({"g": ["A", "A", "B", "B"], "s": [1, 2, 3, 3],
                          "c": ["x", "y", "z", "z"]})
    schema = schema_of(g=QI | {"type": "category"}, s=CONF | {"type": "int"},
                       c=CONF | {"type": "category"})
    got = measure(frame, frame, schema, 2, aligned=True, sensitive=["s", "c"]).to_json()
    # whole s: (1/4, 1/4, 1/2) on 1 < 2 < 3; A (1/2, 1/2, 0), B (0, 0, 1): cumulative
    # differences (1/4, 1/2, 0) and (-1/4, -1/2, 0), over m - 1 = 2: 3/8 each
    assert got["risk"]["sensitive"]["s"] == {"kind": "ordered", "l": 1,
                                             "t": pytest.approx(3 / 8)}
    # c, equal distance: half the L1 distance, 1/2 for both groups
    assert got["risk"]["sensitive"]["c"] == {"kind": "equal", "l": 1, "t": pytest.approx(0.5)}


def test_kinds_override_the_ground_distance():
    frame = pd.DataFrame({"g": ["A", "A", "B", "B"], "s": [1, 2, 3, 3]})
    schema = schema_of(g=QI | {"type": "category"}, s=CONF | {"type": "int"})
    got = measure(frame, frame, schema, 2, aligned=True, sensitive=["s"],
                  kinds={"s": "equal"}).sensitive["s"]
    assert (got.kind, got.t) == ("equal", pytest.approx(0.5))


def test_an_ordinal_answer_is_ordered_by_its_levels():
    # alphabetically "often" < "sometimes"; by level, never < sometimes < often
    frame = pd.DataFrame({"g": ["A", "A", "B", "B"],
                          "s": ["never", "sometimes", "often", "often"]})
    schema = schema_of(g=QI | {"type": "category"},
                       s=CONF | {"type": "ordinal", "levels": list(OFTEN)})
    got = measure(frame, frame, schema, 2, aligned=True, sensitive=["s"]).sensitive["s"]
    assert got.t == pytest.approx(oracle.t_of(frame, ["g"], "s", "ordered", order=OFTEN))
    assert got.t == pytest.approx(3 / 8)


# --- utility ---------------------------------------------------------------------------------


def test_numeric_utility_by_hand():
    original, release, schema = one_column([0.0, 2.0, 4.0, 6.0], [1.0, 1.0, 5.0, 5.0])
    got = measure(original, release, schema, 2, aligned=True).to_json()["utility"]
    # SSE 4, SST 20; means 3 and 3; variances 5 and 4
    assert got["attributes"]["x"] == {
        "type": "float", "il": pytest.approx(0.2), "mean_before": 3.0, "mean_after": 3.0,
        "var_before": 5.0, "var_after": 4.0, "changed_share": 1.0}
    assert got["largest_change"] == {"what": "variance x", "value": pytest.approx(0.2)}


def test_ordinal_and_nominal_utility_by_hand():
    original = pd.DataFrame({"edu": ["none", "primary", "tertiary", "secondary"],
                             "region": ["north", "south", "south", "east"]})
    release = pd.DataFrame({"edu": ["primary", "primary", "secondary", "secondary"],
                            "region": ["south", "south", "south", "south"]})
    schema = schema_of(edu=QI | {"type": "ordinal", "levels": list(LEVELS)},
                       region=QI | {"type": "category", "levels": list(REGIONS)})
    got = measure(original, release, schema, 2, aligned=True).to_json()["utility"]
    edu, region = got["attributes"]["edu"], got["attributes"]["region"]
    # ranks 0 1 3 2 -> 1 1 2 2: shifts 1 0 1 0 over 3 levels apart
    assert edu["il"] == pytest.approx(2 / 4 / 3)
    assert (edu["mean_before"], edu["mean_after"]) == (1.5, 1.5)
    assert (edu["var_before"], edu["var_after"]) == (1.25, 0.25)
    assert edu["changed_share"] == 0.5
    assert region == {"type": "category", "il": 0.5, "mean_before": None, "mean_after": None,
                      "var_before": None, "var_after": None, "changed_share": 0.5}
    assert got["correlation_columns"] == ["edu"]
    assert got["largest_change"] == {"what": "variance edu", "value": pytest.approx(0.8)}


def test_correlations_before_and_after_by_hand():
    original = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "y": [1.0, 2.0, 3.0, 4.0],
                             "q": [4, 3, 2, 1]})
    release = pd.DataFrame({"x": [1.5, 1.5, 3.5, 3.5], "y": [3.5, 3.5, 1.5, 1.5],
                            "q": [4, 3, 2, 1]})
    schema = schema_of(x=QI, y=QI, q=CONF | {"type": "int"})
    got = measure(original, release, schema, 2, aligned=True).to_json()["utility"]
    assert got["correlation_columns"] == ["x", "y", "q"]
    assert np.allclose(got["correlation_before"], [[1, 1, -1], [1, 1, -1], [-1, -1, 1]])
    after = np.sqrt(0.8)  # corr of (1.5, 1.5, 3.5, 3.5) with (4, 3, 2, 1)
    assert np.allclose(got["correlation_after"],
                       [[1, -1, -after], [-1, 1, after], [-after, after, 1]])
    assert got["largest_change"] == {"what": "correlation x~y", "value": pytest.approx(2.0)}
    assert got["attributes"]["q"]["il"] == 0.0
    assert got["attributes"]["q"]["changed_share"] == 0.0


def test_an_undefined_correlation_is_null():
    original, release, schema = one_column([1.0, 2.0], [1.5, 1.5])
    original["y"] = release["y"] = [1.0, 2.0]
    schema = schema_of(x=QI, y=QI)
    got = measure(original, release, schema, 2, aligned=True).to_json()["utility"]
    assert got["correlation_after"] == [[None, None], [None, 1.0]]


# --- the report form, unaligned tables, errors ------------------------------------------------


def test_the_report_form_has_exactly_its_keys_and_plain_json():
    original, schema, key = survey(0)
    release = microaggregate(original, 3, schema=schema, output=Output(shuffle=False)).data
    got = measure(original, release, schema, 3, aligned=True).to_json()
    json.dumps(got, allow_nan=False)
    assert set(got) == {"n_original", "n_release", "key", "risk", "utility"}
    assert got["key"] == key
    assert set(got["risk"]) == {"before", "after", "record_linkage", "interval_disclosure",
                                "sensitive"}
    assert set(got["risk"]["after"]) == {"sample_uniques", "records_in_groups_below_k",
                                         "smallest_group", "groups"}
    assert set(got["utility"]) == {"attributes", "correlation_columns", "correlation_before",
                                   "correlation_after", "largest_change"}
    assert set(got["utility"]["largest_change"]) == {"what", "value"}
    for attribute in got["utility"]["attributes"].values():
        assert set(attribute) == {"type", "il", "mean_before", "mean_after", "var_before",
                                  "var_after", "changed_share"}


def test_without_the_row_link_only_what_needs_none_is_measured():
    original, schema, _ = survey(1)
    release = microaggregate(original, 3, schema=schema, output=Output(seed=1)).data  # shuffled
    got = measure(original, release, schema, 3, aligned=False).to_json()
    assert got["risk"]["record_linkage"] is None
    assert got["risk"]["interval_disclosure"] is None
    assert got["risk"]["after"]["smallest_group"] >= 3
    for attribute in got["utility"]["attributes"].values():
        assert attribute["il"] is None and attribute["changed_share"] is None
    income = got["utility"]["attributes"]["income"]
    assert income["mean_before"] == pytest.approx(original["income"].mean())


def test_refusals():
    original, release, schema = one_column([1.0, 2.0, 3.0], [1.5, 1.5])
    with pytest.raises(InputError, match="one released row per original row"):
        measure(original, release, schema, 2, aligned=True)
    with pytest.raises(ParameterError, match="k must be"):
        measure(original, original, schema, 0, aligned=True)
    with pytest.raises(ParameterError, match="unknown EMD kind"):
        measure(original, original, schema, 2, aligned=True, kinds={"x": "euclid"})
    with pytest.raises(InputError, match="unknown column"):
        measure(original, original.rename(columns={"x": "z"}), schema, 2, aligned=False)


# --- agreement with the oracles on random mixed releases ---------------------------------------


def survey(seed: int, n: int = 90, missing_rate: float = 0.1,
           complete: bool = False) -> tuple[pd.DataFrame, Any, list[str]]:
    """A random mixed survey (float, int, ordinal, category, bool quasi-identifiers; numeric,
    ordinal and categorical answers), its schema and key."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "income": np.round(rng.lognormal(10, 0.8, n), 2),
        "age": rng.integers(16, 95, n),
        "edu": rng.choice(LEVELS, n, p=[0.1, 0.3, 0.4, 0.2]).astype(object),
        "region": rng.choice(REGIONS, n, p=[0.4, 0.3, 0.2, 0.1]).astype(object),
        "smoker": rng.random(n) < 0.3,
        "score": rng.integers(0, 6, n),
        "often": rng.choice(OFTEN, n).astype(object),
        "party": rng.choice(["red", "blue", "green", "grey"], n).astype(object),
    })
    spec: dict[str, Any] = {
        "income": QI | {"type": "float"},
        "age": QI | {"type": "int"},
        "edu": QI | {"type": "ordinal", "levels": list(LEVELS)},
        "region": QI | {"type": "category"},
        "smoker": QI | {"type": "bool"},
        "score": CONF | {"type": "int"},
        "often": CONF | {"type": "ordinal", "levels": list(OFTEN)},
        "party": CONF | {"type": "category"},
    }
    if not complete:
        for name, policy in (("income", "group"), ("age", "impute"), ("edu", "group"),
                             ("region", "impute")):
            gaps = rng.random(n) < missing_rate
            frame[name] = frame[name].astype(object).where(~gaps, None)
            spec[name] |= {"required": False, "missing": policy}
        frame["income"] = frame["income"].astype(float)
        frame["age"] = frame["age"].astype("Int64")
        frame.loc[rng.random(n) < missing_rate, "score"] = np.nan
    key = ["income", "age", "edu", "region", "smoker"]
    return frame, parse_schema(spec), key


SENSITIVE = {"score": ("ordered", None), "often": ("ordered", OFTEN), "party": ("equal", None)}


def noisy(frame: pd.DataFrame, seed: int, flat: bool = False) -> pd.DataFrame:
    """A release that is not microaggregated: a few values moved, so that record linkage
    has near misses and ties; ``flat``: income and age one value each (only the levels tell
    the released records apart)."""
    rng = np.random.default_rng(seed)
    out = frame.copy()
    if flat:
        out["income"] = float(out["income"].median())
        out["age"] = 50
    moved = rng.random(len(out)) < 0.5
    out.loc[moved, "income"] = out.loc[moved, "income"] * rng.uniform(0.7, 1.3, moved.sum())
    out["income"] = out["income"].round(-4)
    out["age"] = (out["age"] // 10) * 10
    swap = rng.random(len(out)) < 0.3
    out.loc[swap, "region"] = rng.choice(REGIONS, swap.sum())
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("make", ["microaggregated", "noisy", "flat"])
def test_agrees_with_the_oracle_on_random_mixed_releases(seed, make):
    original, schema, key = survey(seed)
    release = (microaggregate(original, 3 + seed % 3, schema=schema,
                              output=Output(shuffle=False)).data
               if make == "microaggregated" else noisy(original, seed, flat=make == "flat"))
    got = measure(original, release, schema, 3, aligned=True, sensitive=list(SENSITIVE))
    assert got.before.smallest_group == oracle.k_of(original, key)
    assert got.after.smallest_group == oracle.k_of(release, key)
    assert got.record_linkage == pytest.approx(oracle.dbrl(
        original, release, key, ordinal={"edu": LEVELS}, nominal=("region", "smoker")))
    for name, (kind, order) in SENSITIVE.items():
        assert got.sensitive[name].l == oracle.l_of(release, key, name)
        assert got.sensitive[name].t == pytest.approx(
            oracle.t_of(release, key, name, kind, order=order), abs=1e-9)


def test_the_oracle_emd_agrees_with_its_closed_forms():
    # the LP and the closed forms are two definitions of one number
    rng = np.random.default_rng(7)
    for m in (2, 3, 5, 9):
        p, q = rng.dirichlet(np.ones(m)), rng.dirichlet(np.ones(m))
        i, j = np.indices((m, m))
        ordered = oracle.emd_transport(p, q, np.abs(i - j) / (m - 1))
        equal = oracle.emd_transport(p, q, (i != j).astype(float))
        assert ordered == pytest.approx(np.sum(np.abs(np.cumsum(p - q))) / (m - 1), abs=1e-9)
        assert equal == pytest.approx(0.5 * np.sum(np.abs(p - q)), abs=1e-9)


# --- scale -----------------------------------------------------------------------------------


def large_release(n: int, k: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, Any]:
    """n records with six key attributes and a k-anonymous release of them (cells of k
    records consecutive in income, each attribute's cell value per type)."""
    rng = np.random.default_rng(seed)
    original = pd.DataFrame({
        "income": np.round(rng.lognormal(10, 0.8, n), 2),
        "age": rng.integers(16, 95, n),
        "height": rng.normal(170, 10, n),
        "hours": rng.integers(0, 60, n),
        "edu": rng.choice(LEVELS, n).astype(object),
        "region": rng.choice(REGIONS, n).astype(object),
        "score": rng.integers(0, 6, n),
        "party": rng.choice(["red", "blue", "green"], n).astype(object),
    })
    labels = np.empty(n, dtype=np.int64)
    labels[np.argsort(original["income"].to_numpy())] = np.minimum(np.arange(n) // k,
                                                                   n // k - 1)
    sizes = np.bincount(labels)
    first = np.unique(labels, return_index=True)[1]
    release = original.copy()
    for name in ("income", "height", "age", "hours"):
        means = np.bincount(labels, original[name].to_numpy(float)) / sizes
        release[name] = np.round(means[labels]) if name in ("age", "hours") else means[labels]
    for name in ("edu", "region"):
        release[name] = original[name].to_numpy()[first][labels]
    schema = parse_schema({
        "income": QI, "age": QI | {"type": "int"}, "height": QI, "hours": QI | {"type": "int"},
        "edu": QI | {"type": "ordinal", "levels": list(LEVELS)},
        "region": QI | {"type": "category"}, "score": CONF | {"type": "int"},
        "party": CONF | {"type": "category"}})
    return original, release, schema


def test_measures_a_hundred_thousand_records():
    """Runs at the size of a real survey (about 2 s here; speed is for benchmarks, not
    asserted)."""
    original, release, schema = large_release(100_000, 5)
    got = measure(original, release, schema, 5, aligned=True, sensitive=["score", "party"])
    assert got.after.smallest_group == 5 and got.after.groups == 20_000
    assert 0 <= got.record_linkage <= 1 / 5


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("complete", [False, True])
def test_a_release_measures_on_its_codes_what_the_tables_give(seed, complete):
    """A release measures its risk and utility from the codes it has (``measure(...,
    codes=)``), not from the decoded tables: the same report as ``measure`` of the original
    and the released tables, on mixed data with missing, imputed and withheld values and
    sensitive answers, and on a survey whose keys repeat (the distinct-tuple path)."""
    from streamanon.mixed import sensitive_codes
    from streamanon.release import Privacy, decoded_original, prepare, release_prepared

    frame, schema, _ = survey(seed, n=2_000, complete=complete)
    rng = np.random.default_rng(seed)
    p = rng.zipf(1.5, len(frame)).astype(float)  # a few answers common, many rare
    frame = frame.iloc[rng.choice(len(frame), 12_000, p=p / p.sum())].reset_index(drop=True)
    prepared = prepare(frame, schema, 5)
    assert prepared.tuples is not None and (prepared.tuples.counts < 5).any()
    labels = microaggregate(frame, 5, schema=schema, output=Output(shuffle=False)).labels
    names = list(SENSITIVE)
    S, kinds = sensitive_codes(frame, schema, names)
    privacy = Privacy(tuple(names), S, kinds)  # measured, not enforced (no l, no t)
    released = release_prepared(frame, prepared, labels, 5, seed=3, risk=True,
                                privacy=privacy)  # shuffled: the measures are on the codes
    unshuffled = release_prepared(frame, prepared, labels, 5, seed=None, shuffle=False)
    by_tables = measure(decoded_original(frame, prepared), unshuffled.table, schema, 5,
                        aligned=True, sensitive=names).to_json()
    assert set(by_tables["risk"]["sensitive"]) == set(names)
    assert by_tables["risk"]["after"] != by_tables["risk"]["before"]
    assert json.dumps(released.risk, sort_keys=True) == json.dumps(by_tables, sort_keys=True)
