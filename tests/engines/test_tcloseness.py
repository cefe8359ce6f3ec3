"""t-closeness and l-diversity (streamanon.privacy) and the three t-close microaggregation
engines of Soria-Comas et al.: the EMD on hand-computed cases and against scipy, the vectorised
per-cell functions against a loop, the merging step, the cluster size of algorithm 3 and its
EMD bound, and every engine's invariants on the Census and EIA benchmarks, checked with this
file's own plain EMD."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.stats import wasserstein_distance

from streamanon.engines import available_engines, get_engine, run_engine
from streamanon.engines.tcloseness import (
    _domains,
    _kfirst_cells_numpy,
    kfirst_cells,
    tfirst_cells,
    tfirst_cluster_size,
)
from streamanon.errors import InputError, ParameterError
from streamanon.metrics import standardise
from streamanon.privacy import Domain, cell_distinct, cell_emds, emd, enforce

ENGINES = ["tclose_merge", "tclose_kfirst", "tclose_tfirst"]
SLACK = 1e-12


def plain_emd(cell_values, whole_values, kind: str) -> float:
    """Li et al.'s EMD written out with a dict and a loop, independent of the package."""
    domain = sorted(set(whole_values))
    m = len(domain)
    if m == 1:
        return 0.0
    p = {v: 0.0 for v in domain}
    q = {v: 0.0 for v in domain}
    for v in cell_values:
        p[v] += 1.0 / len(cell_values)
    for v in whole_values:
        q[v] += 1.0 / len(whole_values)
    if kind == "equal":
        return 0.5 * sum(abs(p[v] - q[v]) for v in domain)
    total, running = 0.0, 0.0
    for v in domain:
        running += p[v] - q[v]
        total += abs(running)
    return total / (m - 1)


def check_private(labels, S, kinds, k, t=None, l=None):  # noqa: E741
    """Every cell has >= k records, is t-close and l-diverse in every column: a plain loop."""
    S = np.asarray(S)
    S = S[:, None] if S.ndim == 1 else S
    _, sizes = np.unique(labels, return_counts=True)
    assert sizes.sum() == len(labels) and sizes.min() >= k
    for cell in np.unique(labels):
        rows = labels == cell
        for j, kind in enumerate(kinds):
            whole = S[:, j].tolist()
            if t is not None:
                assert plain_emd(S[rows, j].tolist(), whole, kind) <= t + SLACK
            if l is not None:
                assert len(set(S[rows, j].tolist())) >= l


def raw_violations(labels, S, kind, t) -> int:
    return sum(plain_emd(S[labels == c].tolist(), S.tolist(), kind) > t + SLACK
               for c in np.unique(labels))


# --- the EMD -------------------------------------------------------------------------------


def test_ordered_emd_hand_computed():
    # cell {1, 2} in {1, 2, 3, 4}: p = (1/2, 1/2, 0, 0), q = 1/4 each; cumulative gaps
    # 1/4, 1/2, 1/4, 0 -> sum 1, over m - 1 = 3: 1/3.
    assert emd([1, 2], [1, 2, 3, 4], "ordered") == pytest.approx(1 / 3)
    # cell {1, 3} in {1, 2, 3, 4}: gaps 1/4, 0, 1/4, 0 -> 1/2 over 3: 1/6.
    assert emd([3, 1], [4, 3, 2, 1], "ordered") == pytest.approx(1 / 6)
    # ties: cell {3, 3} in {1, 2, 3, 3}: domain {1, 2, 3}, p = (0, 0, 1), q = (1/4, 1/4, 1/2);
    # gaps -1/4, -1/2, 0 -> 3/4 over m - 1 = 2: 3/8.
    assert emd([3, 3], [1, 2, 3, 3], "ordered") == pytest.approx(3 / 8)
    # the extreme: all mass on the smallest value of a uniform 5-value domain: gaps
    # 4/5, 3/5, 2/5, 1/5 -> 2 over 4: 1/2.
    assert emd([0], [0, 1, 2, 3, 4], "ordered") == pytest.approx(0.5)


def test_equal_emd_hand_computed():
    # cell {a, a} in {a, b, c, c}: p = (1, 0, 0), q = (1/4, 1/4, 1/2); L1 = 3/4 + 1/4 + 1/2
    # = 3/2, half of it: 3/4.
    assert emd(["a", "a"], ["a", "b", "c", "c"], "equal") == pytest.approx(0.75)
    # cell {b, c} in {a, b, c, c}: p = (0, 1/2, 1/2); L1 = 1/4 + 1/4 + 0 -> 1/4.
    assert emd(["b", "c"], ["a", "b", "c", "c"], "equal") == pytest.approx(0.25)
    # the equal distance ignores order: the same cell, values renamed, same EMD.
    assert emd([3, 3], [1, 2, 3, 3], "equal") == emd(["a", "a"], ["c", "b", "a", "a"], "equal")


def test_emd_is_zero_for_one_value_and_for_the_whole():
    assert emd([7, 7], [7, 7, 7], "ordered") == 0.0
    assert emd([7], [7], "equal") == 0.0
    whole = [5, 1, 1, 2, 9, 9, 9]
    assert emd(whole, whole, "ordered") == pytest.approx(0.0, abs=1e-15)
    assert emd(whole, whole, "equal") == pytest.approx(0.0, abs=1e-15)


def test_emd_rejects_values_outside_the_whole_and_unknown_kinds():
    with pytest.raises(InputError, match="occur in the whole"):
        emd([10], [1, 2, 3], "ordered")
    with pytest.raises(ParameterError, match="ordered"):
        emd([1], [1, 2], "euclid")


@pytest.mark.parametrize("seed", range(40))
def test_ordered_emd_is_the_wasserstein_distance_of_normalised_ranks(seed):
    # Independent oracle: with every value replaced by its rank among the m distinct values
    # divided by m - 1, the ordered-distance EMD is scipy's 1-D Wasserstein distance.
    rng = np.random.default_rng(seed)
    whole = rng.integers(0, rng.integers(2, 40), rng.integers(2, 300))
    cell = rng.choice(whole, rng.integers(1, len(whole) + 1), replace=False)
    domain = np.unique(whole)
    m = len(domain)
    if m == 1:
        return
    scale = lambda v: np.searchsorted(domain, v) / (m - 1)  # noqa: E731
    expected = wasserstein_distance(scale(cell), scale(whole))
    assert emd(cell, whole, "ordered") == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("kind", ["ordered", "equal"])
@pytest.mark.parametrize("seed", range(15))
def test_cell_functions_match_a_loop_over_cells(kind, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    labels = rng.choice([3, 10, 11, 40, 41], n) if seed % 2 else rng.integers(0, 30, n)
    s = rng.integers(0, rng.integers(1, 50), n)
    cells = np.unique(labels)
    got = cell_emds(labels, s, kind)
    assert got == pytest.approx([plain_emd(s[labels == c].tolist(), s.tolist(), kind)
                                 for c in cells], abs=1e-12)
    assert cell_distinct(labels, s).tolist() == [len(set(s[labels == c])) for c in cells]


@pytest.mark.parametrize("kind", ["ordered", "equal"])
def test_emd_if_added_is_the_emd_after_adding(kind):
    rng = np.random.default_rng(5)
    domain = Domain.of(rng.integers(0, 12, 200), kind)
    counts = np.bincount(domain.codes[:7], minlength=domain.m).astype(float)
    after = domain.emd_if_added(counts)
    for code in range(domain.m):
        bigger = counts.copy()
        bigger[code] += 1
        assert after[code] == pytest.approx(domain.emd_of_counts(bigger), abs=1e-13)


def test_cell_emds_handles_a_million_records():
    """At the size of a large survey (about a second here; speed is for benchmarks, not
    asserted), and the vectorised EMD of a cell equals the one-cell function's."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5000, 1_000_000)
    s = rng.integers(0, 100_000, 1_000_000)
    emds = cell_emds(labels, s, "ordered")
    distinct = cell_distinct(labels, s)
    assert emds.shape == distinct.shape == (5000,)
    rows = labels == 17
    assert emds[17] == pytest.approx(emd(s[rows], s, "ordered"), abs=1e-12)


# --- the merging step ------------------------------------------------------------------------


def test_enforce_merges_until_every_cell_complies_by_merging_only():
    rng = np.random.default_rng(3)
    Z = standardise(rng.standard_normal((600, 3)))
    s = np.round(10 * Z[:, 0])  # sensitive tied to the first QI: QI cells are not t-close
    labels = np.argsort(np.argsort(Z[:, 0])) // 6
    out = enforce(Z, labels, s, ["ordered"], t=0.15, l=3)
    check_private(out, s, ["ordered"], 6, t=0.15, l=3)
    assert np.array_equal(np.unique(out), np.arange(out.max() + 1))
    for cell in np.unique(labels):  # every original cell lies inside one merged cell
        assert len(np.unique(out[labels == cell])) == 1
    assert np.array_equal(out, enforce(Z, labels, s, ["ordered"], t=0.15, l=3))


def test_enforce_leaves_a_compliant_partition_alone_and_relabels_consecutively():
    Z = np.arange(8.0)[:, None]
    s = np.array([1, 2, 1, 2, 1, 2, 1, 2])
    labels = np.array([5, 5, 9, 9, 2, 2, 7, 7])
    assert enforce(Z, labels, s, "ordered", t=0.0, l=2).tolist() == [1, 1, 3, 3, 0, 0, 2, 2]
    assert enforce(Z, labels, s, "ordered", t=None, l=None).tolist() == [1, 1, 3, 3, 0, 0, 2, 2]


def test_enforce_merges_the_worst_cell_with_its_nearest():
    # Cells on a line: A = {0, 0.1}, B = {1, 1.1}, C = {5, 5.1}; s has domain {0, 1, 2},
    # q = 1/3 each. A holds (0, 0): gaps 2/3, 1/3 -> EMD 1/2. B and C hold (1, 2): gaps
    # -1/3, -1/6 -> 1/4. With t = 0.45 only A violates; B is its nearest (centroid 1.05 vs
    # 5.05); A + B = (0, 0, 1, 2): gaps 1/6, 1/12 -> 1/8, t-close.
    Z = np.array([[0.0], [0.1], [1.0], [1.1], [5.0], [5.1]])
    s = np.array([0, 0, 1, 2, 2, 1])
    assert enforce(Z, [0, 0, 1, 1, 2, 2], s, "ordered", t=0.45, l=None).tolist() == \
        [0, 0, 0, 0, 1, 1]


def test_enforce_ends_with_one_cell_when_the_data_is_not_l_diverse():
    Z = np.arange(6.0)[:, None]
    out = enforce(Z, [0, 0, 1, 1, 2, 2], [1, 1, 2, 2, 1, 2], "equal", t=None, l=3)
    assert out.tolist() == [0] * 6


def test_enforce_checks_every_sensitive_column():
    rng = np.random.default_rng(8)
    Z = rng.standard_normal((300, 2))
    S = np.column_stack([np.round(3 * Z[:, 0]), rng.integers(0, 4, 300)])
    labels = np.argsort(np.argsort(Z[:, 0])) // 5
    out = enforce(Z, labels, S, ["ordered", "equal"], t=0.2, l=2)
    check_private(out, S, ["ordered", "equal"], 5, t=0.2, l=2)


# --- algorithm 3's cluster size --------------------------------------------------------------


def test_tfirst_cluster_size_follows_the_formula():
    # k' = max(k, ceil(n / (2 (n - 1) t + 1))); Census n = 1080:
    # t = 0.1: 1080 / 216.8 = 4.98 -> 5; t = 0.01: 1080 / 22.58 = 47.8 -> 48;
    # t = 0.05: 1080 / 108.9 = 9.92 -> 10; t = 0.2: 1080 / 432.6 = 2.50 -> 3;
    # t = 0.3: 1080 / 648.4 = 1.67 -> 2.
    assert [tfirst_cluster_size(1080, 1, t) for t in (0.1, 0.01, 0.05, 0.2, 0.3)] == \
        [5, 48, 10, 3, 2]
    assert tfirst_cluster_size(1080, 7, 0.1) == 7  # k wins
    assert tfirst_cluster_size(9, 1, 0.125) == 3  # 9 / (2 * 8 * 0.125 + 1) = 3 exactly
    assert tfirst_cluster_size(4092, 1, 0.1) == 5  # EIA: 4092 / 819.2 = 4.995


@pytest.mark.parametrize("n,t", [(100, 0.1), (120, 0.05), (1080, 0.1), (1080, 0.2)])
def test_one_record_per_stratum_meets_the_emd_bound(n, t):
    # Distinct values, n a multiple of k': any cell with one record of each stratum has
    # EMD <= (n - k') / (2 k' (n - 1)) <= t; records at the stratum ends attain the bound.
    size = tfirst_cluster_size(n, 1, t)
    n = n - n % size
    s = np.arange(n)
    width = n // size
    bound = (n - size) / (2 * size * (n - 1))
    assert bound <= t + SLACK
    ends = np.arange(size) * width
    assert emd(ends, s, "ordered") == pytest.approx(bound)
    rng = np.random.default_rng(n)
    for _ in range(50):
        cell = ends + rng.integers(0, width, size)
        assert emd(cell, s, "ordered") <= bound + SLACK


# --- the engines -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def census(datasets_dir):
    # Sensitive: FICA (375 distinct values); TAXINC is a second sensitive column in the
    # multi-attribute test; the other 11 attributes are the quasi-identifiers.
    frame = pd.read_csv(datasets_dir / "census.csv")
    S = frame["FICA"].to_numpy(np.float64)
    X = standardise(frame.drop(columns=["FICA", "TAXINC"]).to_numpy(np.float64))
    return X, S, frame["TAXINC"].to_numpy(np.float64)


@pytest.fixture(scope="module")
def eia(benchmark_data):
    data = benchmark_data["eia"][::3]  # 1364 records: keeps the test short
    return standardise(data[:, :9]), data[:, 9]  # sensitive: TOTREVENUE


def test_engines_are_registered_with_s_per_record():
    names = {e.name for e in available_engines()}
    assert set(ENGINES) <= names
    for name in ENGINES:
        assert get_engine(name).per_record == frozenset({"S"})
        assert {"S", "t", "l", "kinds"} <= set(get_engine(name).parameters)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("t", [0.1, 0.2])
def test_census_cells_are_k_anonymous_t_close_and_deterministic(census, engine, t):
    X, S, _ = census
    labels = run_engine(engine, X, 5, S=S, t=t)
    check_private(labels, S, ["ordered"], 5, t=t)
    assert np.array_equal(labels, run_engine(engine, X, 5, S=S, t=t))


@pytest.mark.parametrize("engine", ENGINES)
def test_eia_cells_are_k_anonymous_t_close(eia, engine):
    X, S = eia
    check_private(run_engine(engine, X, 3, S=S, t=0.15), S, ["ordered"], 3, t=0.15)


@pytest.mark.parametrize("engine", ENGINES)
def test_two_sensitive_columns_with_l_diversity(census, engine):
    X, fica, taxinc = census
    S = np.column_stack([fica, taxinc])
    labels = run_engine(engine, X, 4, S=S, t=0.2, l=4)
    check_private(labels, S, ["ordered", "ordered"], 4, t=0.2, l=4)


@pytest.mark.parametrize("engine", ENGINES)
def test_nominal_sensitive_attribute_with_equal_distance(census, engine):
    X, fica, _ = census
    grade = np.array(["low", "mid", "high", "top"])[np.digitize(
        fica, np.quantile(fica, [0.4, 0.7, 0.9]))]
    labels = run_engine(engine, X, 5, S=grade, t=0.25, l=2, kinds="equal")
    check_private(labels, grade, ["equal"], 5, t=0.25, l=2)


@pytest.mark.parametrize("t", [0.1, 0.2])
def test_tfirst_needs_no_merging_on_one_ordered_attribute(census, eia, t):
    X, S, _ = census
    raw = tfirst_cells(X, 5, S, ["ordered"], t)
    assert np.bincount(raw).min() >= 5
    assert raw_violations(raw, S, "ordered", t) == 0
    X, S = eia
    assert raw_violations(tfirst_cells(X, 3, S, ["ordered"], t), S, "ordered", t) == 0


def test_tfirst_cells_have_the_formula_size(census):
    X, S, _ = census
    for k, t, size in [(2, 0.1, 5), (2, 0.05, 10), (12, 0.1, 12)]:
        sizes = np.bincount(tfirst_cells(X, k, S, ["ordered"], t))
        assert sizes.min() == size and sizes.max() <= size + 1  # 1080 mod k' leftovers


@pytest.mark.parametrize("t", [0.1, 0.2])
def test_kfirst_rarely_needs_merging_on_one_ordered_attribute(census, t):
    # Only the last cell (the records left when fewer than 2k are free) may violate.
    X, S, _ = census
    raw = kfirst_cells(X, 5, S, ["ordered"], t)
    assert raw_violations(raw, S, "ordered", t) <= 1


def test_kfirst_cells_stay_small_when_t_is_loose(census):
    X, S, _ = census
    sizes = np.bincount(run_engine("tclose_kfirst", X, 5, S=S, t=0.6))
    assert np.median(sizes) == 5


@pytest.mark.parametrize("kinds", [("ordered",), ("equal",), ("ordered", "equal")])
@pytest.mark.parametrize("seed, m", [(0, 3), (1, 3), (2, 10)])
def test_compiled_kfirst_takes_the_numpy_loops_decisions(kinds, seed, m):
    # Integer quasi-identifiers and few sensitive values make ties in every decision: the
    # farthest record, the nearest ones and the growth score; from eight columns on, NumPy
    # adds a distance's terms pairwise.
    rng = np.random.default_rng(seed)
    n = 600
    X = standardise(rng.integers(0, 6, (n, m)).astype(np.float64))
    S = np.column_stack([rng.integers(0, 8, n), (X[:, 0] > 0) * 2 + rng.integers(0, 2, n)])
    S = S[:, :len(kinds)]
    for k, t in [(2, 0.1), (3, 0.2), (5, 0.05)]:
        compiled = kfirst_cells(X, k, S, kinds, t)
        reference = _kfirst_cells_numpy(X, k, _domains(S, n, kinds), t, None, None)
        assert np.array_equal(compiled, reference)
        assert np.bincount(compiled).min() >= k and compiled.min() == 0


def tfirst_cells_numpy(X, k, S, t):
    """Algorithm 3's cells before the leftovers, in NumPy (the loop the kernel replaced):
    labels, -1 for the records left."""
    from streamanon.engines.tcloseness import _mdav_seeds

    n = len(X)
    size = tfirst_cluster_size(n, k, t)
    codes = np.unique(S, return_inverse=True)[1].ravel()
    ranked = np.argsort(codes, kind="stable")
    bounds = (np.arange(size + 1) * n) // size
    strata = np.full((size, int(np.diff(bounds).max())), -1, dtype=np.int64)
    for i in range(size):
        strata[i, :bounds[i + 1] - bounds[i]] = ranked[bounds[i]:bounds[i + 1]]
    labels = np.full(n, -1, dtype=np.int64)
    free = np.ones(n, dtype=bool)
    made = 0

    def make_cell(seed):
        nonlocal made
        gap = np.where(strata >= 0, ((X[strata] - X[seed]) ** 2).sum(axis=2), np.inf)
        gap[(strata >= 0) & ~free[strata]] = np.inf
        members = strata[np.arange(size), np.argmin(gap, axis=1)]
        labels[members] = made
        free[members] = False
        made += 1

    _mdav_seeds(X, free, lambda: made < n // size, make_cell, None)
    return labels


@pytest.mark.parametrize("seed, m", [(0, 3), (1, 10)])
def test_compiled_tfirst_takes_the_numpy_loops_decisions(seed, m):
    rng = np.random.default_rng(seed)
    n = 1003  # leftovers for every k' below
    X = standardise(rng.integers(0, 6, (n, m)).astype(np.float64))
    S = rng.integers(0, 40, n)
    for k, t in [(2, 0.1), (5, 0.2), (3, 0.02)]:
        compiled = tfirst_cells(X, k, S, ("ordered",), t)
        reference = tfirst_cells_numpy(X, k, S, t)
        assert (reference >= 0).sum() == n - n % tfirst_cluster_size(n, k, t)
        assert np.array_equal(compiled[reference >= 0], reference[reference >= 0])
        assert compiled.min() == 0


def test_compiled_kfirst_matches_the_numpy_loop_on_census(census):
    X, S, _ = census
    for t in (0.1, 0.3):
        reference = _kfirst_cells_numpy(X, 5, _domains(S, len(S), ("ordered",)), t, None, None)
        assert np.array_equal(kfirst_cells(X, 5, S, ("ordered",), t), reference)


def test_compiled_kfirst_advances_the_progress_counter(census):
    from streamanon.progress import Progress

    X, S, _ = census
    progress = Progress()
    kfirst_cells(X, 5, S, ("ordered",), 0.2, progress=progress)
    assert progress.total == len(X) and len(X) - 2 * 5 < progress.done <= len(X)


@pytest.mark.parametrize("engine", ENGINES)
def test_small_inputs(engine):
    rng = np.random.default_rng(4)
    for n, k in [(1, 1), (4, 4), (9, 5), (13, 3)]:
        X = rng.standard_normal((n, 2))
        S = rng.integers(0, 3, n)
        labels = run_engine(engine, X, k, S=S, t=0.3)
        check_private(labels, S, ["ordered"], k, t=0.3)


def test_parameter_errors(census):
    X, S, _ = census
    with pytest.raises(ParameterError, match="S= are required"):
        run_engine("tclose_kfirst", X, 5, t=0.1)
    with pytest.raises(ParameterError, match=r"t= .* or l="):
        run_engine("tclose_merge", X, 5, S=S)
    with pytest.raises(ParameterError, match="in \\[0, 1\\]"):
        run_engine("tclose_merge", X, 5, S=S, t=1.5)
    with pytest.raises(ParameterError, match="needs t > 0"):
        run_engine("tclose_tfirst", X, 5, S=S, l=2)
    with pytest.raises(ParameterError, match="only 2 distinct"):
        run_engine("tclose_kfirst", X, 5, S=S > S.mean(), l=3)
    with pytest.raises(ParameterError, match="EMD kinds"):
        run_engine("tclose_kfirst", X, 5, S=S, t=0.1, kinds=["ordered", "equal"])
    with pytest.raises(ParameterError, match="cannot wrap"):
        run_engine("tclose_merge", X, 5, S=S, t=0.1, engine="tclose_tfirst")
    with pytest.raises(InputError, match="rows"):
        run_engine("tclose_merge", X, 5, S=S[:10], t=0.1)
