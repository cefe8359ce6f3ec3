"""The checks that decide whether a release is private enough (t-closeness and distinct
l-diversity in streamanon.privacy, the release gate in streamanon.release and
streamanon.metrics) against plain references from the definitions, on random partitions and
at the boundaries of their thresholds: the mutation run of docs/benchmarks/mutation.md found
these places unchecked."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from streamanon import metrics, privacy
from streamanon.errors import InputError, KAnonymityError, ParameterError
from streamanon.release import Privacy, key_groups
from tests import privacy_oracle as oracle


def closed_form_emd(cell: np.ndarray, whole: np.ndarray, kind: str) -> float:
    """Li et al.'s closed forms over the whole column's sorted distinct values:
    sum |cumulative gaps| / (m - 1) (ordered), half the L1 distance (equal)."""
    domain = np.unique(whole)
    if len(domain) == 1:
        return 0.0
    p = np.array([(cell == v).mean() for v in domain])
    q = np.array([(whole == v).mean() for v in domain])
    if kind == "ordered":
        return float(np.abs(np.cumsum(p - q)[:-1]).sum() / (len(domain) - 1))
    return float(0.5 * np.abs(p - q).sum())


def random_partition(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels (sparse, unsorted: 7 + 3 * a cell number) and a sensitive column over 1 to 9
    values, some of them absent from some cells."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 60))
    cells = int(rng.integers(1, max(2, n // 2)))
    labels = 7 + 3 * rng.permutation(np.arange(n) % cells)
    m = int(rng.integers(1, 10))
    sensitive = rng.choice(np.arange(m) * 2.5 - 3, n, p=rng.dirichlet(np.ones(m)))
    return labels, sensitive


@pytest.mark.parametrize("kind", privacy.KINDS)
@pytest.mark.parametrize("seed", range(40))
def test_every_cells_emd_and_distinct_count_are_the_definitions(seed, kind):
    labels, sensitive = random_partition(seed)
    emds = privacy.cell_emds(labels, sensitive, kind)
    distinct = privacy.cell_distinct(labels, sensitive)
    for i, label in enumerate(np.unique(labels)):  # entry i: the i-th smallest label
        cell = sensitive[labels == label]
        assert emds[i] == pytest.approx(closed_form_emd(cell, sensitive, kind), abs=1e-12)
        assert privacy.emd(cell, sensitive, kind) == pytest.approx(emds[i], abs=1e-12)
        assert distinct[i] == len(set(cell.tolist()))


@pytest.mark.parametrize("kind", privacy.KINDS)
def test_the_closed_forms_are_the_transport_problems_emd(kind):
    """The closed forms above against the explicit transport linear programme of the oracle,
    on small domains."""
    for seed in range(10):
        labels, sensitive = random_partition(100 + seed)
        whole = np.unique(sensitive)
        q = np.array([(sensitive == v).mean() for v in whole])
        for label in np.unique(labels):
            cell = sensitive[labels == label]
            p = np.array([(cell == v).mean() for v in whole])
            assert closed_form_emd(cell, sensitive, kind) == pytest.approx(
                oracle.emd(p, q, kind), abs=1e-7)


@pytest.mark.parametrize("kind", privacy.KINDS)
@pytest.mark.parametrize("seed", range(20))
def test_the_emd_with_one_more_record_is_that_cells_emd(seed, kind):
    rng = np.random.default_rng(seed)
    whole = rng.integers(0, int(rng.integers(1, 8)), 50)
    domain = privacy.Domain.of(whole, kind)
    counts = rng.integers(0, 4, domain.m).astype(float)
    counts[rng.integers(domain.m)] += 1  # never an empty cell
    added = domain.emd_if_added(counts)
    assert len(added) == domain.m
    for c in range(domain.m):
        one_more = counts.copy()
        one_more[c] += 1
        assert added[c] == pytest.approx(domain.emd_of_counts(one_more), abs=1e-12)
        cell = np.repeat(np.unique(whole), one_more.astype(int))
        assert added[c] == pytest.approx(closed_form_emd(cell, whole, kind), abs=1e-12)


def test_an_emd_needs_values_of_the_whole_column_and_a_known_kind():
    with pytest.raises(InputError, match="occur in the whole"):
        privacy.emd([5], [1, 2, 3], "ordered")
    with pytest.raises(InputError, match="occur in the whole"):
        privacy.emd([1.5], [1, 2, 3], "ordered")
    with pytest.raises(InputError, match="at least one value"):
        privacy.emd([], [1, 2], "equal")
    with pytest.raises(ParameterError, match="ordered"):
        privacy.emd([1], [1, 2], "nominal")
    with pytest.raises(InputError, match="labels"):
        privacy.cell_emds([0, 1], [1, 2, 3], "ordered")


def reference_enforce(Z: np.ndarray, labels: np.ndarray, S: np.ndarray, kinds: list[str],
                      t: float | None, l: int | None) -> list[frozenset]:  # noqa: E741
    """Soria-Comas et al.'s merging, one merge at a time from the definitions: the violating
    cell with the largest EMD (then fewest distinct values, then lowest label) joins the cell
    of the nearest centroid (ties to the lower label); the merged cell keeps the lower label."""
    cells = {int(c): set(np.flatnonzero(labels == c).tolist()) for c in np.unique(labels)}

    def scores(rows: set) -> tuple[float, int]:
        cell = sorted(rows)
        worst = max(closed_form_emd(S[cell, j], S[:, j], kind)
                    for j, kind in enumerate(kinds))
        fewest = min(len(set(S[cell, j].tolist())) for j in range(S.shape[1]))
        return worst, fewest

    def violates(rows: set) -> bool:
        worst, fewest = scores(rows)
        return (t is not None and worst > t + privacy.TOLERANCE) or (
            l is not None and fewest < l)

    while len(cells) > 1:
        bad = [c for c in sorted(cells) if violates(cells[c])]
        if not bad:
            break
        worst = min(bad, key=lambda c: (-(scores(cells[c])[0] if t is not None else 0.0),
                                        scores(cells[c])[1], c))
        centre = Z[sorted(cells[worst])].mean(axis=0)
        others = [c for c in sorted(cells) if c != worst]
        gaps = [((Z[sorted(cells[c])].mean(axis=0) - centre) ** 2).sum() for c in others]
        nearest = others[int(np.argmin(gaps))]
        keep, drop = min(worst, nearest), max(worst, nearest)
        cells[keep] |= cells.pop(drop)
    return sorted(frozenset(rows) for rows in cells.values())


@pytest.mark.parametrize("seed", range(30))
def test_enforce_merges_as_the_papers_rule_says_until_every_cell_is_private(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 40))
    Z = rng.normal(size=(n, 2)).round(1)  # rounded: ties among centroids happen
    labels = rng.permutation(np.arange(n) % int(rng.integers(2, n // 2 + 1)))
    S = np.column_stack([rng.integers(0, int(rng.integers(2, 6)), n),
                         rng.choice([0, 1, 2], n, p=[.7, .2, .1])])
    kinds = [str(rng.choice(privacy.KINDS)), str(rng.choice(privacy.KINDS))]
    t = None if seed % 3 == 0 else float(rng.uniform(0.05, 0.4))
    l = None if seed % 3 == 1 else int(rng.integers(1, 4))  # noqa: E741
    if t is None and l is None:
        t = 0.2
    out = privacy.enforce(Z, labels, S, kinds, t=t, l=l)
    got = sorted(frozenset(np.flatnonzero(out == c).tolist()) for c in np.unique(out))
    assert got == reference_enforce(Z, labels, S, kinds, t, l)
    # numbered 0..c-1 in the order of their lowest original label
    firsts = [labels[out == c].min() for c in range(int(out.max()) + 1)]
    assert firsts == sorted(firsts) and set(out.tolist()) == set(range(len(firsts)))


@pytest.mark.parametrize("Z, labels, S, t, l", [
    # a cell violating l only, with a smaller EMD than a cell that is private: only the
    # violating cells are candidates
    ([3, 3, 1, 1, 0, 0, 0, 1, 4, 3, 5, 3, 3, 5], [4, 3, 5, 4, 2, 0, 0, 1, 3, 5, 2, 0, 1, 1],
     [1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 1, 2, 3], 0.5988839743156844, 2),
    # without t, a merged cell that still violates l is picked by its fewest values like
    # any other, not first because it was merged
    ([2, 4, 4, 2, 4, 4, 4, 1, 2, 4], [4, 2, 0, 0, 2, 1, 3, 3, 4, 1],
     [2, 0, 2, 3, 0, 2, 1, 1, 0, 0], None, 3),
])
def test_enforce_picks_the_violating_cell_by_its_emd_then_its_fewest_values(Z, labels, S, t, l):  # noqa: E741
    Z, labels, S = np.array(Z, float)[:, None], np.array(labels), np.array(S)[:, None]
    out = privacy.enforce(Z, labels, S, "ordered", t=t, l=l)
    got = sorted(frozenset(np.flatnonzero(out == c).tolist()) for c in np.unique(out))
    assert got == reference_enforce(Z, labels, S, ["ordered"], t, l)


def test_a_cell_exactly_at_t_plus_the_tolerance_is_t_close():
    """EMD <= t + TOLERANCE is t-close: at the boundary itself nothing is merged."""
    labels = np.array([0, 0, 1, 1, 2, 2])
    S = np.array([0, 0, 1, 2, 1, 2])
    worst = privacy.cell_emds(labels, S, "ordered").max()
    t = worst - privacy.TOLERANCE
    while t + privacy.TOLERANCE < worst:
        t = np.nextafter(t, 1.0)
    while t + privacy.TOLERANCE > worst:
        t = np.nextafter(t, 0.0)
    assert t + privacy.TOLERANCE == worst
    Z = np.arange(6.0)[:, None]
    assert privacy.enforce(Z, labels, S, "ordered", t=t, l=None).tolist() == labels.tolist()
    assert privacy.enforce(Z, labels, S, "ordered", t=np.nextafter(t, 0.0),
                           l=None).tolist() != labels.tolist()


def test_enforce_takes_any_sortable_answers_and_ordered_by_default():
    Z = np.arange(6.0)[:, None]
    labels = np.array([0, 0, 1, 1, 2, 2])
    S = np.array([0, 0, 1, 2, 1, 2])
    by_default = privacy.enforce(Z, labels, S, None, t=0.2, l=None)
    assert by_default.tolist() == privacy.enforce(Z, labels, S, "ordered", t=0.2,
                                                  l=None).tolist()
    as_text = np.array(["a", "a", "b", "c", "b", "c"])
    assert privacy.enforce(Z, labels, as_text, "equal", t=0.2, l=2).tolist() == (
        privacy.enforce(Z, labels, S, "equal", t=0.2, l=2).tolist())
    with pytest.raises(InputError, match="vector or an n x s"):
        privacy.enforce(Z, labels, np.empty((6, 0)), "ordered", t=0.2, l=None)
    with pytest.raises(InputError, match="vector or an n x s"):
        privacy.enforce(Z, labels, np.zeros((6, 1, 1)), "ordered", t=0.2, l=None)
    with pytest.raises(InputError, match="NaN"):
        privacy.enforce(Z, labels, np.array([0, 1, np.nan, 1, 0, 1]), "ordered", t=0.2,
                        l=None)
    with pytest.raises(InputError, match="6 records"):
        privacy.enforce(Z, labels, S[:5], "ordered", t=0.2, l=None)


def test_a_column_of_one_value_is_t_close_and_an_empty_one_is_refused():
    assert privacy.cell_emds([3], [7.0], "ordered").tolist() == [0.0]
    assert privacy.cell_emds([0, 1], [7.0, 7.0], "equal").tolist() == [0.0, 0.0]
    assert privacy.emd([7.0], [7.0], "ordered") == 0.0
    with pytest.raises(InputError, match="at least one value"):
        privacy.cell_emds([], [], "ordered")
    with pytest.raises(InputError, match="at least one value"):
        privacy.emd([1], [], "ordered")


def test_enforce_leaves_a_private_partition_alone_and_always_ends():
    Z = np.arange(8.0)[:, None]
    labels = np.array([3, 3, 5, 5, 9, 9, 11, 11])
    S = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    assert privacy.enforce(Z, labels, S, "ordered", t=0.0, l=2).tolist() == [
        0, 0, 1, 1, 2, 2, 3, 3]
    assert privacy.enforce(Z, labels, S, "ordered", t=None, l=None).tolist() == [
        0, 0, 1, 1, 2, 2, 3, 3]
    # an l no cell can reach: one cell of everything, however many passes it takes
    assert privacy.enforce(Z, labels, S, "equal", t=None, l=5).tolist() == [0] * 8


def frame_with_groups(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 40))
    return pd.DataFrame({
        "a": rng.choice(["x", "y", None], n, p=[.5, .3, .2]),
        "b": rng.choice([1.0, 2.0, np.nan], n, p=[.5, .3, .2]),
        "s": rng.choice([0, 1, 2, 3], n),
        "u": rng.choice(["p", "q", None], n),
    })


@pytest.mark.parametrize("seed", range(20))
def test_the_gate_measures_l_and_t_on_the_groups_a_reader_sees(seed):
    frame = frame_with_groups(seed)
    key = ["a", "b"]
    groups = key_groups(frame, key)
    assert sorted(map(sorted, oracle.group_rows(frame, key))) == sorted(
        sorted(np.flatnonzero(groups == g).tolist()) for g in np.unique(groups))
    S = frame[["s"]].to_numpy()
    achieved = Privacy(("s",), S, ("ordered",)).achieved(groups)["s"]
    assert achieved["l"] == oracle.l_of(frame, key, "s")
    assert achieved["t"] == pytest.approx(oracle.t_of(frame, key, "s", "ordered"), abs=1e-7)
    l, t = achieved["l"], achieved["t"]  # noqa: E741
    # exactly at the thresholds passes; one step beyond fails, naming the column
    assert Privacy(("s",), S, ("ordered",), l=l, t=t).gate(frame, key)["s"]["l"] == l
    with pytest.raises(KAnonymityError, match=f"s: l = {l} < {l + 1}"):
        Privacy(("s",), S, ("ordered",), l=l + 1).gate(frame, key)
    if t > 1e-9:
        with pytest.raises(KAnonymityError, match="s: t = "):
            Privacy(("s",), S, ("ordered",), t=t - 1e-9).gate(frame, key)


def test_the_gate_passes_t_exactly_at_its_slack_and_enforce_merges_with_its_settings():
    frame = pd.DataFrame({"a": ["x", "x", "y", "y", "z", "z"], "s": [0, 0, 1, 2, 1, 2]})
    S = frame[["s"]].to_numpy()
    achieved = Privacy(("s",), S, ("ordered",)).achieved(key_groups(frame, ["a"]))["s"]["t"]
    t = achieved - 1e-12
    while t + 1e-12 < achieved:
        t = np.nextafter(t, 1.0)
    while t + 1e-12 > achieved:
        t = np.nextafter(t, 0.0)
    assert t + 1e-12 == achieved
    Privacy(("s",), S, ("ordered",), t=t).gate(frame, ["a"])  # at the slack: passes
    with pytest.raises(KAnonymityError):
        Privacy(("s",), S, ("ordered",), t=np.nextafter(t, 0.0)).gate(frame, ["a"])
    # Privacy.enforce is privacy.enforce with the privacy's own kinds, t and l
    Z = np.arange(6.0)[:, None]
    labels = np.array([0, 0, 1, 1, 2, 2])
    assert Privacy(("s",), S, ("ordered",)).enforce(Z, labels) is labels
    for kinds, t, l in ((("ordered",), 0.2, None), (("equal",), 0.3, None),  # noqa: E741
                        (("ordered",), None, 2), (("equal",), 0.3, 2), (("ordered",), 0.5, 3)):
        want = privacy.enforce(Z, labels, S, list(kinds), t=t, l=l)
        assert Privacy(("s",), S, kinds, l=l, t=t).enforce(Z, labels).tolist() == want.tolist()
    # the settings above are told apart: each gives another partition than its neighbours
    assert privacy.enforce(Z, labels, S, "equal", t=0.3, l=None).tolist() != (
        privacy.enforce(Z, labels, S, "ordered", t=0.3, l=None).tolist())


@pytest.mark.parametrize("seed", range(20))
def test_the_k_anonymity_gate_counts_every_group_a_missing_value_a_value_of_its_own(seed):
    frame = frame_with_groups(seed)
    key = ["a", "b", "u"]
    sizes = [len(rows) for rows in oracle.group_rows(frame, key)]
    for k in (1, min(sizes), min(sizes) + 1, len(frame), len(frame) + 1):
        report = metrics.check_table_k_anonymity(frame, key, k)
        small = [s for s in sizes if s < k]
        assert (report.k, report.n_records, report.n_groups, report.smallest_group,
                report.groups_below_k, report.records_below_k) == (
            k, len(frame), len(sizes), min(sizes), len(small), sum(small))
        ok = not small and len(frame) >= k
        assert report.ok == ok
        if ok:
            assert metrics.require_k_anonymous_table(frame, key, k) == report
        else:
            with pytest.raises(KAnonymityError, match=f"not {k}-anonymous: {len(small)} "):
                metrics.require_k_anonymous_table(frame, key, k)


@pytest.mark.parametrize("seed", range(10))
def test_the_numeric_gate_compares_tuples_exactly(seed):
    rng = np.random.default_rng(seed)
    Q = rng.choice([0.1, 0.2, 0.1 + 1e-15], (30, 2))
    sizes = list(pd.DataFrame(Q).value_counts())
    k = min(sizes)
    for kk in (k, k + 1):
        report = metrics.check_k_anonymity(Q, kk)
        assert (report.n_groups, report.smallest_group, report.ok) == (
            len(sizes), k, kk == k)
    with pytest.raises(KAnonymityError):
        metrics.require_k_anonymous(Q, k + 1)
    assert metrics.require_k_anonymous(Q, k).smallest_group == k
    # the general path (not floats: np.unique over rows) counts the same tuples
    as_integers = np.rint(Q * 1e16).astype(np.int64)
    report = metrics.check_k_anonymity(as_integers, k)
    assert (report.n_groups, report.smallest_group, report.ok) == (len(sizes), k, True)
    one_column = metrics.check_k_anonymity(np.array([1, 1, 2, 2, 2]), 2)
    assert (one_column.n_groups, one_column.smallest_group) == (2, 2)
    with_nan = Q.copy()
    with_nan[0, 0] = np.nan  # np.unique's path: NaN rows compared as they are
    assert metrics.check_k_anonymity(with_nan, 1).n_records == 30


def test_an_empty_or_too_small_table_is_never_k_anonymous():
    empty = pd.DataFrame({"a": pd.Series([], dtype=object)})
    assert metrics.check_table_k_anonymity(empty, ["a"], 1) == metrics.KAnonymityReport(
        1, 0, 0, 0, 0, 0)
    assert not metrics.check_table_k_anonymity(empty, ["a"], 1).ok
    assert not metrics.check_table_k_anonymity(pd.DataFrame({"a": [1, 1]}), ["a"], 3).ok
    with pytest.raises(InputError, match="unknown column"):
        metrics.check_table_k_anonymity(pd.DataFrame({"a": [1]}), ["b"], 1)


def test_verify_requires_k_and_explains_a_failure_at_exactly_k_records(tmp_path, capsys):
    from streamanon.cli import main

    path = tmp_path / "release.csv"
    pd.DataFrame({"a": ["x", "x", "y"]}).to_csv(path, index=False)
    with pytest.raises(SystemExit) as stopped:
        main(["verify", str(path), "--qi", "a"])
    assert stopped.value.code == 2 and "--k" in capsys.readouterr().err
    assert main(["verify", str(path), "--qi", "a", "--k", "3"]) == 1
    assert "2 of 2 quasi-identifier groups (3 of 3 records) occur fewer than 3 times" in (
        capsys.readouterr().err)


def released(frame: pd.DataFrame, schema_fields: dict, labels, k: int, **options):
    from streamanon.release import prepare, release_prepared
    from streamanon.schema import parse_schema

    schema = parse_schema(schema_fields)
    return release_prepared(frame, prepare(frame, schema, k), np.asarray(labels), k, seed=3,
                            **options)


NUMERIC = {"x": {"role": "quasi_identifier", "type": "float"},
           "y": {"role": "quasi_identifier", "type": "float"},
           "s": {"role": "confidential", "type": "int"}}
MIXED = {**NUMERIC, "c": {"role": "quasi_identifier", "type": "category",
                          "levels": ["a", "b"]}}


@pytest.mark.parametrize("fields", [NUMERIC, MIXED], ids=["plain numeric", "mixed"])
def test_release_prepared_never_returns_a_table_that_fails_the_gate(fields):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=12), "y": rng.normal(size=12),
                          "s": [0, 1, 2] * 4, "c": ["a"] * 12})
    good = np.repeat(np.arange(4), 3)
    out = released(frame, fields, good, 3)
    key = [c for c in ("x", "y", "c") if c in fields]
    assert oracle.k_of(out.table, key) == 3
    unshuffled = released(frame, fields, good, 3, shuffle=False)
    assert not out.table.equals(unshuffled.table)  # shuffled unless told not to
    assert out.privacy is None and out.risk is None
    small = good.copy()
    small[-1] = 4
    with pytest.raises(KAnonymityError, match="not 3-anonymous"):
        released(frame, fields, small, 3)
    # the l/t part of the gate, on the released groups
    S = frame[["s"]].to_numpy()
    cells_of_one_answer = np.empty(12, dtype=np.int64)  # the first cell: three answers 0
    cells_of_one_answer[np.argsort(frame["s"].to_numpy(), kind="stable")] = good
    with pytest.raises(KAnonymityError, match="s: l = 1 < 2"):
        released(frame, fields, cells_of_one_answer, 3,
                 privacy=Privacy(("s",), S, ("ordered",), l=2))
    diverse = released(frame, fields, good, 3, privacy=Privacy(("s",), S, ("ordered",), l=3))
    assert diverse.privacy["s"]["l"] == 3


def test_a_cell_that_mixes_missing_and_answered_withholds_the_answer_for_every_member():
    """Every member of a cell gets one released tuple: where any member's group withholds an
    attribute (its answer is missing), the whole cell's is withheld, never a mean of the
    others' answers shown for a record that gave none."""
    fields = {"x": {"role": "quasi_identifier", "type": "float"},
              "y": {"role": "quasi_identifier", "type": "float", "required": False}}
    frame = pd.DataFrame({"x": np.arange(12.0),
                          "y": [1.0, 2, 3, np.nan, np.nan, np.nan, 4, 5, 6, 7, 8, 9]})
    labels = [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 0]
    table = released(frame, fields, labels, 3, shuffle=False).table
    assert table["y"].isna().tolist() == [False] * 2 + [True] * 6 + [False] * 4
    assert table["x"].tolist() == [4.0, 4.0] + [3.0] * 3 + [6.0] * 3 + [9.0] * 3 + [4.0]
