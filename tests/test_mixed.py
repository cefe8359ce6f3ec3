"""Mixed survey data (issue 15, :mod:`streamanon.mixed`): the mixed distance is the embedded
one, all-numeric data is released exactly as before, the per-type cell values, missing-value
groups, strata and weights, the engines that work on nominal data, and the errors."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd
import pytest

from streamanon import Output, TwoStage, microaggregate
from streamanon.engines import run_engine, validate_input
from streamanon.errors import InputError, ParameterError
from streamanon.metrics import aggregate, check_table_k_anonymity, distortion, fit_standardisation
from streamanon.mixed import (
    Column,
    Encoding,
    embed,
    encoding_for,
    fit_embedding,
    mixed_distance,
    mixed_engines,
)
from streamanon.released_values import release_codes
from streamanon.schema import parse_schema
from streamanon.type_loss import loss_by_type

LEVELS = ("none", "primary", "secondary", "tertiary")  # an ordinal, in order
REGIONS = ("north", "south", "east", "west")
SITES = ("A", "B", "C")
QI = ("income", "age", "edu", "region", "smoker")
MAYBE_MISSING = ("income", "age", "edu", "region")

# --- random mixed data ---------------------------------------------------------------------


def survey(seed: int, n: int = 150, missing_rate: float = 0.15) -> pd.DataFrame:
    """A random survey: float, int, ordinal, category and bool quasi-identifiers, an
    identifier, a stratum, a weight and a confidential row number (arrival order)."""
    rng = np.random.default_rng(seed)
    sites = np.repeat(SITES, [n // 2, n // 3, n - n // 2 - n // 3])
    frame = pd.DataFrame({
        "rid": [f"r{seed}-{i}" for i in range(n)],
        "income": np.round(rng.lognormal(10, 0.8, n), 2),
        "age": pd.array(rng.integers(16, 95, n), dtype="Int64"),
        "edu": pd.Series(rng.choice(LEVELS, n, p=[0.1, 0.3, 0.4, 0.2]), dtype=object),
        "region": pd.Series(rng.choice(REGIONS, n, p=[0.4, 0.3, 0.2, 0.1]), dtype=object),
        "smoker": rng.random(n) < 0.3,
        "site": rng.permutation(sites),
        "w": rng.uniform(0.5, 4.0, n),
        "row": np.arange(n),
    })
    for name in MAYBE_MISSING:
        gaps = rng.random(n) < missing_rate
        frame.loc[gaps, name] = np.nan if name == "income" else None
        if name == "age":
            frame["age"] = frame["age"].astype("Int64")
    return frame


def survey_schema(policies: dict[str, str], *, declare_regions: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "rid": {"role": "identifier"},
        "income": {"role": "quasi_identifier", "type": "float"},
        "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 110},
        "edu": {"role": "quasi_identifier", "type": "ordinal", "levels": list(LEVELS)},
        "region": {"role": "quasi_identifier", "type": "category"},
        "smoker": {"role": "quasi_identifier", "type": "bool"},
        "site": {"role": "confidential"},
        "w": {"role": "weight", "type": "float"},
        "row": {"role": "confidential", "type": "int"},
    }
    if declare_regions:
        spec["region"]["levels"] = list(REGIONS)
    for name, policy in policies.items():
        spec[name] |= {"required": False, "missing": policy}
    return spec


def policies_for(kind: str, seed: int) -> dict[str, str]:
    if kind == "mixed":
        rng = np.random.default_rng(1000 + seed)
        return {name: str(rng.choice(["group", "impute"])) for name in MAYBE_MISSING}
    return dict.fromkeys(MAYBE_MISSING, kind)


CASES = [(seed, kind, k) for seed in range(6) for kind, k in
         (("group", 3), ("impute", 2), ("mixed", 5))]
TWO_STAGE = "nn_split_end"


@functools.cache
def mixed_release(seed: int, kind: str, k: int, incremental: str | None = None) -> tuple:
    """(input, policies, result) of one random mixed release, in input order."""
    frame = survey(seed, n=300 if incremental else 150)
    policies = policies_for(kind, seed)
    two_stage = TwoStage(incremental=incremental, nu=0.2) if incremental else None
    result = microaggregate(frame, k, schema=survey_schema(policies, declare_regions=seed % 2 == 0),
                            strata=["site"], output=Output(shuffle=False), two_stage=two_stage)
    return frame, policies, result


def all_cases():
    return [pytest.param(*case, None, id=f"seed{case[0]}-{case[1]}-k{case[2]}")
            for case in CASES] + [
        pytest.param(seed, kind, 3, TWO_STAGE, id=f"two-stage-seed{seed}-{kind}")
        for seed in range(3) for kind in ("group", "impute", "mixed")]


def as_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells comparable with missing as a value of its own."""
    return frame.astype(object).where(frame.notna(), "<missing>")


def level_index(values: pd.Series, levels: tuple) -> np.ndarray:
    where = {level: i for i, level in enumerate(levels)}
    return np.array([np.nan if pd.isna(v) else where[v] for v in values], dtype=np.float64)


def expected_cell_value(x: np.ndarray, w: np.ndarray, kind: str, n_levels: int) -> float:
    """The docstring's cell value of the observed codes ``x`` with weights ``w``, by hand."""
    if kind in ("float", "int"):
        mean = sum(wi * xi for xi, wi in zip(x, w, strict=True)) / sum(w)
        return float(np.rint(mean)) if kind == "int" else mean
    table = [sum(wi for xi, wi in zip(x, w, strict=True) if xi == level)
             for level in range(n_levels)]
    if kind == "ordinal":  # the lowest level whose cumulative weight reaches half
        running = 0.0
        for level, weight in enumerate(table):
            running += weight
            if running >= sum(w) / 2:
                return float(level)
    return float(table.index(max(table)))  # nominal: the first of the modal levels


# --- 1. the mixed distance is the embedded squared distance --------------------------------


def random_complete_frame(rng: np.random.Generator) -> tuple[pd.DataFrame, dict[str, Any]]:
    n = int(rng.integers(8, 60))
    counts = rng.integers(0, 3, 5)
    if counts.sum() == 0:
        counts[rng.integers(5)] = 1
    columns: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    for j in range(counts[0]):
        scale = rng.choice([1e-3, 1.0, 1e4, 0.0])  # 0: a constant column
        columns[f"f{j}"] = 5.0 + scale * rng.standard_normal(n)
        spec[f"f{j}"] = {"role": "quasi_identifier", "type": "float"}
    for j in range(counts[1]):
        columns[f"i{j}"] = rng.integers(-3, int(rng.integers(-2, 40)), n)
        spec[f"i{j}"] = {"role": "quasi_identifier", "type": "int"}
    for j in range(counts[2]):
        levels = [f"o{t}" for t in range(int(rng.integers(2, 7)))]
        used = levels[: int(rng.integers(1, len(levels) + 1))]  # some levels never seen
        columns[f"o{j}"] = rng.choice(used, n)
        spec[f"o{j}"] = {"role": "quasi_identifier", "type": "ordinal", "levels": levels}
    for j in range(counts[3]):
        levels = [f"c{t}" for t in range(int(rng.integers(1, 6)))]
        columns[f"c{j}"] = rng.choice(levels, n, p=rng.dirichlet(np.ones(len(levels))))
        spec[f"c{j}"] = {"role": "quasi_identifier", "type": "category"}
        if rng.random() < 0.5:
            spec[f"c{j}"]["levels"] = [*levels, "never"]
    for j in range(counts[4]):
        columns[f"b{j}"] = rng.random(n) < rng.uniform(0, 1)
        spec[f"b{j}"] = {"role": "quasi_identifier", "type": "bool"}
    return pd.DataFrame(columns), spec


def distance_by_definition(frame: pd.DataFrame, spec: dict[str, Any], i: int, j: int) -> float:
    """The module docstring's d^2, from the raw values: sigma of the values or of the ranks,
    and 2 [x != y] / (1 - sum p^2) for a nominal attribute."""
    total = 0.0
    for name, field in spec.items():
        column = frame[name]
        if field["type"] in ("float", "int", "ordinal"):
            values = (level_index(column, tuple(field["levels"])) if field["type"] == "ordinal"
                      else column.to_numpy(dtype=np.float64))
            sigma = values.std()
            if values[i] != values[j]:
                total += ((values[i] - values[j]) / sigma) ** 2
        elif column.iloc[i] != column.iloc[j]:
            p = column.value_counts(normalize=True).to_numpy()
            total += 2.0 / (1.0 - float(np.sum(p * p)))
    return total


@pytest.mark.parametrize("seed", range(50))
def test_mixed_distance_equals_squared_euclidean_distance_of_the_embedding(seed):
    rng = np.random.default_rng(seed)
    frame, spec = random_complete_frame(rng)
    encoding = encoding_for(frame, parse_schema(spec))
    C = encoding.codes(frame)
    scaling = fit_embedding(C, encoding)
    Z = embed(C, encoding, scaling)
    pairs = [(int(a), int(b)) for a, b in rng.integers(0, len(frame), (40, 2))] + [(0, 0)]
    for a, b in pairs:
        embedded = float(np.sum((Z[a] - Z[b]) ** 2))
        assert mixed_distance(C[a], C[b], encoding, scaling) == pytest.approx(embedded, rel=1e-9)
        assert embedded == pytest.approx(distance_by_definition(frame, spec, a, b), rel=1e-9)


# --- 2. all-numeric complete data: exactly today's release ---------------------------------


@pytest.mark.parametrize("engine", ["mdav", "mdav_star", "ona_star", "mondrian"])
@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("seed", range(3))
def test_numeric_data_gives_the_legacy_partition_values_and_distortion_bit_for_bit(engine, k,
                                                                                  seed):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(40, 250)), int(rng.integers(1, 5))
    frame = pd.DataFrame(rng.lognormal(3, 1, (n, m)) * rng.uniform(0.01, 100, m),
                         columns=[f"x{j}" for j in range(m)])
    frame["count"] = rng.integers(0, 6, n)  # integer-valued, with many ties
    frame["note"] = rng.integers(0, 1000, n)
    qi = [*frame.columns[:m], "count"]
    result = microaggregate(frame, k, engine, qi=qi, confidential=["note"],
                            output=Output(shuffle=False))

    X = validate_input(frame[qi].to_numpy(dtype=np.float64), k)  # C order, as before issue 15
    Z = fit_standardisation(X).apply(X)
    labels = run_engine(engine, Z, k)
    assert np.array_equal(result.labels, labels)
    assert np.array_equal(result.data[qi].to_numpy(dtype=np.float64), aggregate(X, labels))
    assert result.distortion == distortion(Z, labels)
    assert np.array_equal(result.data["note"].to_numpy(), frame["note"].to_numpy())


# --- 4 and 7. invariants of mixed releases -------------------------------------------------


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_every_record_is_released_once_in_input_order(seed, kind, k, incremental):
    frame, _, result = mixed_release(seed, kind, k, incremental)
    table = result.data
    assert len(table) == len(frame) == len(result.labels)
    assert list(table.columns) == [c for c in frame.columns if c != "rid"]
    assert table["row"].tolist() == list(range(len(frame)))
    assert table["site"].tolist() == frame["site"].tolist()


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_every_cell_has_at_least_k_records(seed, kind, k, incremental):
    _, _, result = mixed_release(seed, kind, k, incremental)
    assert np.bincount(result.labels).min() >= k
    assert result.report()["smallest_cell"] >= k


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_released_quasi_identifiers_are_k_anonymous_with_missing_as_a_value(seed, kind, k,
                                                                          incremental):
    _, _, result = mixed_release(seed, kind, k, incremental)
    report = check_table_k_anonymity(result.data, list(QI), k)
    assert report.ok, report
    # a stricter reading: every distinct tuple, missing compared as a value, occurs k times
    assert as_keys(result.data[list(QI)]).value_counts(dropna=False).min() >= k


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_members_of_a_cell_share_every_released_value(seed, kind, k, incremental):
    _, _, result = mixed_release(seed, kind, k, incremental)
    per_cell = as_keys(result.data[list(QI)]).groupby(result.labels).nunique()
    assert (per_cell == 1).all().all()


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_released_values_are_the_weighted_per_type_cell_values(seed, kind, k, incremental):
    frame, _, result = mixed_release(seed, kind, k, incremental)
    kinds = {"income": ("float", 0), "age": ("int", 0), "edu": ("ordinal", len(LEVELS)),
             "region": ("category", len(REGIONS)), "smoker": ("bool", 2)}
    regions = REGIONS if seed % 2 == 0 else tuple(sorted(REGIONS))  # declared, or seen
    levels = {"edu": LEVELS, "region": regions, "smoker": (False, True)}
    w = frame["w"].to_numpy()
    checked = 0
    for name, (kind_of, n_levels) in kinds.items():
        original = (level_index(frame[name], levels[name]) if name in levels
                    else frame[name].to_numpy(dtype=np.float64, na_value=np.nan))
        released = (level_index(result.data[name], levels[name]) if name in levels
                    else result.data[name].to_numpy(dtype=np.float64, na_value=np.nan))
        for cell in np.unique(result.labels):
            members = np.flatnonzero(result.labels == cell)
            seen = members[~np.isnan(original[members])]
            value = released[members[0]]
            if np.isnan(value) or seen.size == 0:
                continue  # withheld, or filled from all records
            expected = expected_cell_value(original[seen], w[seen], kind_of, n_levels)
            assert value == pytest.approx(expected, rel=1e-12), (name, cell)
            checked += 1
    assert checked > len(kinds) * np.unique(result.labels).size // 2


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_released_values_have_their_declared_types(seed, kind, k, incremental):
    _, _, result = mixed_release(seed, kind, k, incremental)
    table = result.data
    assert pd.api.types.is_integer_dtype(table["age"])
    ages = table["age"].dropna().to_numpy(dtype=np.float64)
    assert np.array_equal(ages, np.round(ages))
    assert set(table["edu"].dropna()) <= set(LEVELS)
    assert set(table["region"].dropna()) <= set(REGIONS)
    assert set(table["smoker"].dropna()) <= {True, False}
    assert pd.api.types.is_float_dtype(table["income"])


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_weights_and_confidential_columns_are_published_unchanged(seed, kind, k, incremental):
    frame, _, result = mixed_release(seed, kind, k, incremental)
    assert np.array_equal(result.data["w"].to_numpy(), frame["w"].to_numpy())
    assert result.report()["weight"] == "w"
    assert "rid" not in result.data.columns


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_cells_never_cross_strata_when_every_stratum_has_k_records(seed, kind, k, incremental):
    frame, _, result = mixed_release(seed, kind, k, incremental)
    assert frame["site"].value_counts().min() >= k
    strata_per_cell = frame["site"].groupby(result.labels).nunique()
    assert (strata_per_cell == 1).all()
    assert result.report()["strata_merged"] == []


def group_patterns(frame: pd.DataFrame, policies: dict[str, str]) -> tuple[list[str], pd.Series]:
    """The fields of policy ``group``, and each record's count of records with its stratum
    and pattern of missing such fields."""
    grouped = [name for name, policy in policies.items() if policy == "group"]
    key = frame[grouped].isna().astype(int).astype(str).agg("".join, axis=1) + frame["site"]
    return grouped, key.map(key.value_counts())


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_a_pattern_of_k_records_is_released_with_exactly_its_missing_fields(seed, kind, k,
                                                                          incremental):
    frame, policies, result = mixed_release(seed, kind, k, incremental)
    grouped, pattern_size = group_patterns(frame, policies)
    large = (pattern_size >= k).to_numpy()
    assert large.any()
    for name in grouped:
        assert np.array_equal(result.data[name].isna().to_numpy()[large],
                              frame[name].isna().to_numpy()[large]), name


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_fields_of_policy_impute_are_never_missing_in_the_release(seed, kind, k, incremental):
    frame, policies, result = mixed_release(seed, kind, k, incremental)
    imputed = [name for name, policy in policies.items() if policy == "impute"]
    for name in imputed:
        assert frame[name].isna().any()
        assert not result.data[name].isna().any(), name
    if kind == "impute":
        assert not result.data[list(QI)].isna().any().any()
        assert result.report()["values_withheld"] == 0


@pytest.mark.parametrize(("seed", "kind", "k", "incremental"), all_cases())
def test_withheld_and_imputed_counts_are_those_of_the_release(seed, kind, k, incremental):
    frame, _, result = mixed_release(seed, kind, k, incremental)
    before = frame[list(QI)].isna().to_numpy()
    after = result.data[list(QI)].isna().to_numpy()
    report = result.report()
    assert report["values_withheld"] == int(np.sum(~before & after))
    assert report["values_imputed"] == int(np.sum(before & ~after))


@pytest.mark.parametrize("incremental", [None, TWO_STAGE])
def test_same_input_and_seed_give_the_same_release(incremental):
    frame = survey(7, n=300)
    schema = survey_schema(policies_for("mixed", 7))
    two_stage = TwoStage(incremental=incremental, nu=0.2) if incremental else None
    runs = [microaggregate(frame.copy(), 3, schema=schema, strata=["site"],
                           output=Output(seed=11), two_stage=two_stage)
            for _ in range(2)]
    assert np.array_equal(runs[0].labels, runs[1].labels)
    pd.testing.assert_frame_equal(runs[0].data, runs[1].data)
    assert runs[0].data["row"].tolist() != list(range(len(frame)))  # it was shuffled


def test_two_stage_release_reports_its_split():
    frame, _, result = mixed_release(0, "group", 3, TWO_STAGE)
    report = result.report()
    assert report["incremental"] == TWO_STAGE
    n_plus = round(0.2 * len(frame))
    assert (report["n_0"], report["n_plus"]) == (len(frame) - n_plus, n_plus)


def test_a_quasi_identifier_stratum_is_released_unchanged_when_no_stratum_is_merged():
    frame = survey(3, missing_rate=0.0)
    schema = survey_schema({})
    assert frame["region"].value_counts().min() >= 3
    result = microaggregate(frame, 3, schema=schema, strata=["region"],
                            output=Output(shuffle=False))
    assert result.data["region"].tolist() == frame["region"].tolist()
    assert (frame["region"].groupby(result.labels).nunique() == 1).all()


def test_a_stratum_under_k_joins_the_stratum_with_the_nearest_centroid():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(0, 1, 10), rng.normal(100, 1, 10), [99.0, 101.0]])
    frame = pd.DataFrame({"x": x, "s": ["far"] * 10 + ["near"] * 10 + ["small"] * 2})
    schema = {"x": {"role": "quasi_identifier"}, "s": {"role": "confidential"}}
    result = microaggregate(frame, 3, schema=schema, strata=["s"], output=Output(shuffle=False))
    # strata in order of first appearance: far 1, near 2, small 3; named by number, since
    # their values are responses (no declared levels) and the small one's is hidden
    assert result.report()["strata_merged"] == [
        {"stratum": "stratum 3", "into": "stratum 2", "records": 2}]
    assert "=small" not in repr(result.report())
    assert np.bincount(result.labels).min() >= 3
    far = result.labels[:10]
    assert not set(far) & set(result.labels[10:])  # cells still never cross far | near+small


# --- missing-value groups by hand ----------------------------------------------------------


def pattern_frame(sizes: dict[tuple[bool, bool], int]) -> pd.DataFrame:
    """Records whose (income missing, edu missing) pattern has the given counts."""
    rng = np.random.default_rng(2)
    rows = []
    for (no_income, no_edu), count in sizes.items():
        for _ in range(count):
            rows.append({"income": np.nan if no_income else float(rng.integers(100, 200)),
                         "edu": None if no_edu else str(rng.choice(LEVELS)),
                         "pattern": f"{int(no_income)}{int(no_edu)}"})
    return pd.DataFrame(rows)


PATTERN_SCHEMA = {
    "income": {"role": "quasi_identifier", "required": False},
    "edu": {"role": "quasi_identifier", "type": "ordinal", "levels": list(LEVELS),
            "required": False},
    "pattern": {"role": "confidential"},
}


def test_a_small_pattern_joins_the_larger_of_equally_near_patterns_and_is_withheld():
    # complete (2 records) differs by one field from both {income} (10) and {edu} (5)
    frame = pattern_frame({(True, False): 10, (False, True): 5, (False, False): 2})
    result = microaggregate(frame, 3, schema=PATTERN_SCHEMA, output=Output(shuffle=False))
    moved = (frame["pattern"] == "00").to_numpy()
    assert result.data["income"][moved].isna().all()  # withheld: {income} lacks it
    assert result.data["edu"][moved].notna().all()
    assert result.report()["values_withheld"] == 2
    assert result.report()["values_imputed"] == 0
    stay = ~moved
    assert np.array_equal(result.data.isna().to_numpy()[stay], frame.isna().to_numpy()[stay])


def test_a_small_pattern_joins_the_pattern_with_fewest_differing_fields_and_is_imputed():
    # {income, edu} (2 records) differs by one field from {income} (6), by two from {} (10)
    frame = pattern_frame({(False, False): 10, (True, False): 6, (True, True): 2})
    result = microaggregate(frame, 3, schema=PATTERN_SCHEMA, output=Output(shuffle=False))
    moved = (frame["pattern"] == "11").to_numpy()
    assert result.data["income"][moved].isna().all()
    assert result.data["edu"][moved].notna().all()  # imputed: {income} has it
    assert set(result.data["edu"][moved]) <= set(LEVELS)
    assert result.report()["values_imputed"] == 2
    assert result.report()["values_withheld"] == 0
    assert check_table_k_anonymity(result.data, ["income", "edu"], 3).ok


def test_quick_form_missing_group_keeps_the_gaps_of_a_large_pattern():
    rng = np.random.default_rng(8)
    frame = pd.DataFrame({"a": rng.normal(size=30), "b": rng.normal(size=30)})
    frame.loc[:5, "a"] = np.nan
    result = microaggregate(frame, 3, missing="group", output=Output(shuffle=False))
    assert result.data["a"].isna().tolist() == frame["a"].isna().tolist()
    assert not result.data["b"].isna().any()


def test_a_boolean_with_missing_values_is_released_as_levels_and_gaps():
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"b": pd.array(rng.random(40) < 0.5, dtype="boolean"),
                          "x": rng.normal(size=40)})
    frame.loc[:5, "b"] = pd.NA
    schema = {"b": {"role": "quasi_identifier", "type": "bool", "required": False},
              "x": {"role": "quasi_identifier"}}
    result = microaggregate(frame, 3, schema=schema, output=Output(shuffle=False))
    assert result.data["b"].isna().tolist() == frame["b"].isna().tolist()
    assert set(result.data["b"].dropna()) <= {True, False}


def test_an_ordinal_categorical_column_without_every_declared_level_is_released():
    # a pandas Categorical whose categories are the levels seen, not all the levels declared
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"edu": pd.Categorical(rng.choice(LEVELS[:3], 40)),
                          "x": rng.normal(size=40)})
    schema = {"edu": {"role": "quasi_identifier", "type": "ordinal", "levels": list(LEVELS)},
              "x": {"role": "quasi_identifier"}}
    result = microaggregate(frame, 3, schema=schema, output=Output(shuffle=False))
    assert set(result.data["edu"]) <= set(LEVELS[:3])
    assert check_table_k_anonymity(result.data, ["edu", "x"], 3).ok


# --- 5. per-type cell values and losses by hand --------------------------------------------

HAND = Encoding((Column("x", "float"), Column("n", "int"),
                 Column("o", "ordinal", ("a", "b", "c", "d")),
                 Column("c", "category", ("r", "g", "b")), Column("t", "bool", (False, True))))
HAND_LABELS = np.array([0, 0, 0, 1, 1, 1, 1])
HAND_WEIGHTS = np.array([1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0])
HAND_CODES = np.array([
    # x     n    o    c    t        cell 0 weights 1, 1, 3; cell 1 weights 1
    [1.0, 0.0, 0.0, 2.0, 1.0],
    [2.0, 0.0, 1.0, 2.0, 1.0],
    [4.0, 3.0, 3.0, 1.0, 0.0],
    [10.0, 3.0, 0.0, 2.0, 1.0],
    [10.0, 3.0, 1.0, 1.0, 0.0],
    [20.0, 3.0, 2.0, 2.0, 1.0],
    [30.0, 4.0, 3.0, 1.0, 0.0],
])


def test_release_codes_by_hand_with_weights():
    R = release_codes(HAND_CODES, HAND_LABELS, HAND, weights=HAND_WEIGHTS)
    cell0 = [
        (1 + 2 + 12) / 5,  # weighted mean (unweighted: 7/3)
        2.0,               # int: rint(9/5 = 1.8) (unweighted: 1)
        3.0,               # ordinal weighted lower median: weights 1,1,0,3 reach 2.5 at d
        1.0,               # nominal weighted mode: g (3) beats b (1 + 1)
        0.0,               # bool weighted mode: False (3) beats True (1 + 1)
    ]
    cell1 = [
        17.5,  # mean of 10, 10, 20, 30
        3.0,   # rint(3.25)
        1.0,   # medians b and c tie: b, short of its share by 2 (c by 1; d over by 1)
        2.0,   # g and b tie 2 - 2: b, which cell 0 left short of its share (g has its 5)
        1.0,   # False and True tie: True, short of its share (False has its 5)
    ]
    assert np.array_equal(R, np.array([cell0] * 3 + [cell1] * 4))


def test_release_codes_without_weights_are_plain_mean_median_and_mode():
    R = release_codes(HAND_CODES, HAND_LABELS, HAND)
    assert R[0, 0] == pytest.approx(7 / 3, rel=1e-15)
    assert R[0, 1:].tolist() == [1.0, 1.0, 2.0, 1.0]  # rint(1), b, b (2 of 3), True


def test_release_codes_withholds_and_fills_a_cell_without_observed_values():
    enc = Encoding((Column("x", "float", missing="impute"),
                    Column("o", "ordinal", ("a", "b", "c"), missing="impute")))
    C = np.array([[np.nan, np.nan], [np.nan, np.nan],
                  [1.0, 0.0], [3.0, 2.0], [8.0, 2.0],
                  [100.0, 0.0], [100.0, 1.0]])
    labels = np.array([0, 0, 1, 1, 1, 2, 2])
    withheld = np.zeros_like(C, dtype=bool)
    withheld[4, 0] = True
    R = release_codes(C, labels, enc, withheld)
    # cell 0 has no observed value: the mean over all records, the lower median of a c c a b
    assert R[:2].tolist() == [[212.0 / 5, 1.0]] * 2
    assert R[2:4].tolist() == [[4.0, 2.0]] * 2
    assert np.isnan(R[4, 0]) and R[4, 1] == 2.0  # withheld
    assert R[5:].tolist() == [[100.0, 0.0]] * 2


LOSS = Encoding((Column("o", "ordinal", ("a", "b", "c", "d", "e")),
                 Column("c", "category", ("r", "g", "b"))))
LOSS_C = np.array([[0, 0], [4, 0], [2, 1], [2, 2], [1, 1], [np.nan, np.nan]], dtype=float)
LOSS_R = np.array([[2, 0], [2, 0], [2, 0], [2, 0], [np.nan, np.nan], [3, 2]], dtype=float)


def test_loss_by_type_is_the_normalised_rank_shift_and_the_share_changed():
    loss = loss_by_type(LOSS_C, LOSS_R, LOSS, fit_embedding(LOSS_C, LOSS))
    assert loss["ordinal"] == pytest.approx((2 / 4 + 2 / 4 + 0 + 0) / 4)  # of 4 released
    assert loss["nominal"] == pytest.approx(2 / 4)  # the third and fourth changed
    assert loss["numeric"] is None
    assert (loss["withheld"], loss["imputed"]) == (2, 2)


def test_loss_by_type_is_weighted_by_the_sampling_weights():
    w = np.array([1.0, 3.0, 1.0, 1.0, 5.0, 5.0])
    loss = loss_by_type(LOSS_C, LOSS_R, LOSS, fit_embedding(LOSS_C, LOSS), weights=w)
    assert loss["ordinal"] == pytest.approx((0.5 * 1 + 0.5 * 3) / 6)
    assert loss["nominal"] == pytest.approx((1 + 1) / 6)


# --- 6. engines and errors -----------------------------------------------------------------


def nominal_frame() -> tuple[pd.DataFrame, dict[str, Any]]:
    frame = survey(1, n=60, missing_rate=0.0).drop(columns=["rid", "site", "w", "row"])
    schema = {name: spec for name, spec in survey_schema({}).items() if name in frame.columns}
    return frame, schema


@pytest.mark.parametrize("engine", ["mondrian", "mondrian_v", "mondrian_v2d", "lda_mdav",
                                    "dependence"])
def test_an_engine_that_cuts_coordinates_is_refused_on_nominal_data(engine):
    frame, schema = nominal_frame()
    with pytest.raises(ParameterError) as caught:
        microaggregate(frame, 3, engine, schema=schema)
    message = str(caught.value)
    assert engine in message and "region" in message and "smoker" in message
    for accepted in ("mdav", "mdav_star", "ona_star"):
        assert accepted in message


@pytest.mark.parametrize("engine", sorted(e for e in mixed_engines() if not e.startswith("tclose")))
def test_a_mixed_engine_is_accepted_on_nominal_data(engine):
    """(The t-closeness engines need sensitive answers: tests/test_privacy_releases.py runs
    them on nominal keys.)"""
    frame, schema = nominal_frame()
    result = microaggregate(frame, 3, engine, schema=schema, output=Output(shuffle=False))
    assert np.bincount(result.labels).min() >= 3
    assert check_table_k_anonymity(result.data, list(QI), 3).ok


def test_mondrian_is_accepted_on_ordinal_and_numeric_data():
    frame, schema = nominal_frame()
    keep = ["income", "age", "edu"]
    result = microaggregate(frame[keep], 3, "mondrian",
                            schema={name: schema[name] for name in keep},
                            output=Output(shuffle=False))
    assert check_table_k_anonymity(result.data, keep, 3).ok


@pytest.mark.parametrize("column", ["region", "edu"])
def test_a_value_outside_the_levels_names_the_column_and_count_but_not_the_value(column):
    frame, schema = nominal_frame()
    frame.loc[[4, 9], column] = "Secret Valley"
    with pytest.raises(InputError) as caught:
        microaggregate(frame, 3, schema=schema)
    message = str(caught.value)
    assert column in message and "2 value(s)" in message
    assert "Secret" not in message


def test_a_fraction_in_an_int_field_names_the_column_and_count_but_not_the_value():
    frame, schema = nominal_frame()
    frame["age"] = frame["age"].astype(float)
    frame.loc[[3, 5, 8], "age"] = 41.625
    with pytest.raises(InputError) as caught:
        microaggregate(frame, 3, schema=schema)
    message = str(caught.value)
    assert "age" in message and "3 value(s)" in message and "integer" in message
    assert "41" not in message


def test_quick_form_refuses_text_and_points_to_a_schema():
    frame, _ = nominal_frame()
    with pytest.raises(InputError, match=r"column region is not numeric.*--schema"):
        microaggregate(frame, 3, qi=["income", "region"], drop=["age", "edu", "smoker"])


def test_an_ordinal_without_levels_is_a_schema_error():
    frame, schema = nominal_frame()
    del schema["edu"]["levels"]
    with pytest.raises(InputError, match=r"edu\.levels: an ordinal field needs its levels"):
        microaggregate(frame, 3, schema=schema)


def test_quick_form_with_a_missing_value_names_the_column_and_first_row_on_one_line():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=20), "b": rng.normal(size=20)})
    frame.loc[[6, 11], "b"] = np.nan
    with pytest.raises(InputError) as caught:
        microaggregate(frame, 3, qi=["a", "b"])
    message = str(caught.value)
    assert "\n" not in message
    assert "column(s) b " in message and "first at row 7" in message
    assert "--missing" in message


def test_ties_do_not_all_move_a_margin_the_same_way():
    """Cells of five different states (every level ties): always the first level would give
    the first states every record; the rule keeps each state's count within one cell of its
    share, at the same loss (one value in five kept per cell either way)."""
    levels = tuple(f"s{i:02d}" for i in range(50))
    enc = Encoding((Column("state", "category", levels),))
    rng = np.random.default_rng(0)
    codes = rng.permutation(np.repeat(np.arange(50), 20)).astype(float)[:, None]  # 1,000
    labels = np.arange(1000) // 5
    R = release_codes(codes, labels, enc)
    before = np.bincount(codes[:, 0].astype(int), minlength=50)
    after = np.bincount(R[:, 0].astype(int), minlength=50)
    assert np.abs(after - before).max() <= 5 + 5  # at most a cell either side of its share
    kept = np.mean(R[:, 0] == codes[:, 0])
    first = np.array([codes[labels == c, 0].min() for c in range(200)])[labels]  # the old rule
    assert kept >= np.mean(first == codes[:, 0])
    assert 0.5 * np.abs(after - before).sum() / 1000 < 0.5 * np.abs(
        np.bincount(first.astype(int), minlength=50) - before).sum() / 1000


@pytest.mark.parametrize("kind", ["category", "ordinal"])
def test_text_read_by_arrow_is_released_as_the_same_text(kind):
    """A CSV's text column (pandas' Arrow-backed ``str``) is decoded by Arrow's take: the
    same values, missing ones included, and the same type as decoding through Python
    strings gives."""
    enc = Encoding((Column("g", kind, ("low", "mid", "high"), missing="impute"),))
    like = pd.DataFrame({"g": pd.Series(["low", "mid", None, "high"] * 5, dtype="str")})
    C = np.array([[0.0], [1.0], [np.nan], [2.0]] * 5)
    decoded = enc.decode(C, like=like)["g"]
    as_python = pd.Series(np.array(["low", "mid", "high", None], dtype=object)[
        np.where(np.isnan(C[:, 0]), -1, C[:, 0]).astype(np.int64)], dtype="str")
    pd.testing.assert_series_equal(decoded, as_python)
    assert decoded.isna().sum() == 5


def test_missing_columns_are_found_without_looking_at_every_value_as_by_looking():
    from streamanon.mixed import missing_columns

    rng = np.random.default_rng(3)
    for _ in range(50):
        C = rng.choice([0.0, 1.0, np.nan, np.inf, -np.inf, 1e308], size=(rng.integers(0, 6), 4),
                       p=[0.4, 0.3, 0.05, 0.1, 0.1, 0.05])
        assert np.array_equal(missing_columns(C), np.isnan(C).any(axis=0))


def test_unweighted_levels_are_counted_as_weights_of_one_count_them():
    """Complete level columns without weights are counted as integers: the same released
    levels, ties included, as weights of one give."""
    rng = np.random.default_rng(8)
    enc = Encoding((Column("o", "ordinal", ("a", "b", "c", "d")),
                    Column("c", "category", ("r", "g", "b")), Column("t", "bool", (False, True))))
    C = np.column_stack([rng.integers(0, 4, 3000), rng.integers(0, 3, 3000),
                         rng.integers(0, 2, 3000)]).astype(float)
    labels = rng.integers(0, 300, 3000)  # cells of about ten: many ties
    assert np.array_equal(release_codes(C, labels, enc),
                          release_codes(C, labels, enc, weights=np.ones(3000)))
