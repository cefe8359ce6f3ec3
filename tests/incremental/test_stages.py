"""Incremental stages: invariants, exactness against a plain loop, edge cases, D_T."""

from __future__ import annotations

import numpy as np
import pytest

from streamanon.engines.mdav import mdav
from streamanon.errors import ParameterError
from streamanon.incremental import available_stages, run_stage
from streamanon.incremental.run import TwoStageRun, split_by_ratio
from streamanon.metrics import distortion, sse, sst, standardise
from tests.incremental.reference_nn import reference_adjoin
from tests.reference_mdav import reference_mdav

STAGES = [s.name for s in available_stages()]
NN_STAGES = {"nn": {}, "nn_inertial": {"inertial": True}, "nn_split_mid": {"split": "mid"},
             "nn_split_end": {"split": "end"}}


def split_data(n=600, m=3, nu=0.3, seed=0, k=5, ties=False):
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, m))
    if ties:
        Z = np.round(Z * 2) / 2
    n0 = split_by_ratio(n, nu)
    base, inc = Z[:n0], Z[n0:]
    return base, mdav(base, k), inc


def test_all_paper_stages_are_registered():
    assert set(STAGES) == {"two_stage", "nn", "nn_inertial", "nn_split_mid", "nn_split_end"}


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("nu", [0.01, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("k", [2, 5, 10])
def test_every_cell_has_k_and_every_record_one_cell(stage, nu, k):
    base, labels0, inc = split_data(n=500, nu=nu, k=k, seed=k)
    labels = run_stage(stage, base, labels0, inc, k)
    assert labels.shape == (len(base) + len(inc),)
    sizes = np.bincount(labels)
    assert (sizes > 0).all() and sizes.min() >= k


@pytest.mark.parametrize("stage", STAGES)
def test_deterministic(stage):
    base, labels0, inc = split_data(seed=3)
    first = run_stage(stage, base, labels0, inc, 5)
    assert all(np.array_equal(run_stage(stage, base, labels0, inc, 5), first) for _ in range(3))


@pytest.mark.parametrize("stage", sorted(NN_STAGES))
@pytest.mark.parametrize("index", ["kdtree", "blocks", "scan"])
@pytest.mark.parametrize("seed,ties", [(0, False), (1, False), (2, True), (3, True)])
def test_nn_stages_equal_a_plain_sequential_loop(stage, index, seed, ties):
    base, labels0, inc = split_data(n=400, m=3, nu=0.4, seed=seed, ties=ties)
    expected = reference_adjoin(base, labels0, inc, 5, **NN_STAGES[stage])
    got = run_stage(stage, base, labels0, inc, 5, index=index)
    assert np.array_equal(got, expected)


def test_split_mid_rebuilds_its_index_and_stays_exact(monkeypatch):
    """Force index rebuilds after every split: many new centroids, moved ones, exact still."""
    import streamanon.incremental.nn as nn_module

    monkeypatch.setattr(nn_module, "_EXTRAS_LIMIT", 1)
    monkeypatch.setattr(nn_module, "_CHUNK", 7)
    base, labels0, inc = split_data(n=500, m=2, nu=0.7, seed=9)
    expected = reference_adjoin(base, labels0, inc, 4, split="mid")
    assert np.array_equal(run_stage("nn_split_mid", base, labels0, inc, 4, index="kdtree"),
                          expected)


@pytest.mark.parametrize("stage", sorted(NN_STAGES))
def test_the_blocked_search_in_tiny_blocks_rebuilt_every_few_records_stays_exact(
        stage, monkeypatch):
    """Blocks of 3 records by 5 cells, the index rebuilt every 7 records: lists filled across
    many blocks, cells taken out of the index, splits beside them; the same labels."""
    import streamanon.incremental.nn as nn_module

    monkeypatch.setattr(nn_module, "_BLOCK_RECORDS", 3)
    monkeypatch.setattr(nn_module, "_BLOCK_CELLS", 5)
    monkeypatch.setattr(nn_module, "_BLOCK_CHUNK", 7)
    base, labels0, inc = split_data(n=500, m=4, nu=0.6, seed=11, ties=True)
    expected = reference_adjoin(base, labels0, inc, 4, **NN_STAGES[stage])
    assert np.array_equal(run_stage(stage, base, labels0, inc, 4, index="blocks"), expected)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("offset", [1e4, 3e7])
def test_the_blocked_search_is_exact_far_from_the_origin(offset, seed):
    """|x|^2 + |y|^2 - 2 x.y cancels badly when the records lie far from the origin (at 3e7,
    without the allowance for rounding in its bound, the search trusts a wrong list and
    these labels differ): the labels are still those of the plain loop."""
    base, labels0, inc = split_data(n=600, m=12, nu=0.3, seed=seed)
    base, inc = base + offset, inc + offset
    expected = reference_adjoin(base, labels0, inc, 5, split="end")
    assert np.array_equal(run_stage("nn_split_end", base, labels0, inc, 5, index="blocks"),
                          expected)


def test_the_blocked_search_proves_its_choices_without_scanning_every_cell(large_split,
                                                                        monkeypatch):
    """Near the origin the candidates' bound holds for every late record: no record falls back
    to a scan of every cell (a bound that allowed too much rounding would scan them all, as
    slow as the scan and still exact, so the equality tests would not see it)."""
    import streamanon.incremental.nn as nn_module

    scans = []
    original = nn_module.adjoin

    def counted(*args):
        out = original(*args)
        scans.append(int(args[-1][0]))  # stats[0]: full scans so far
        return out

    monkeypatch.setattr(nn_module, "adjoin", counted)
    base, labels0, inc = large_split
    run_stage("nn_split_end", base, labels0, inc, LARGE_K, index="blocks")
    assert scans and scans[-1] <= len(inc) // 100


def test_auto_takes_the_tree_in_few_columns_and_blocks_for_many_cells_in_many():
    from streamanon.incremental.nn import BLOCKS_MIN_VALUES, TREE_MAX_DIMENSION, search_for

    m = TREE_MAX_DIMENSION + 1
    assert search_for("auto", TREE_MAX_DIMENSION, 10**6) == "kdtree"
    assert search_for("auto", m, BLOCKS_MIN_VALUES // m) == "scan"
    assert search_for("auto", m, BLOCKS_MIN_VALUES // m + 1) == "blocks"
    assert search_for("scan", 2, 10**6) == "scan"


@pytest.mark.parametrize("nu", [0.2, 0.6, 0.9])
def test_split_end_leaves_no_cell_of_2k_or_more(nu):
    base, labels0, inc = split_data(n=800, nu=nu, seed=4)
    sizes = np.bincount(run_stage("nn_split_end", base, labels0, inc, 5))
    assert sizes.max() < 10
    plain = np.bincount(run_stage("nn", base, labels0, inc, 5))
    assert plain.max() >= 10  # without splitting, cells do grow past 2k


def test_two_stage_keeps_base_cells_and_runs_mdav_on_the_increment():
    base, labels0, inc = split_data(nu=0.3)
    labels = run_stage("two_stage", base, labels0, inc, 5)
    assert np.array_equal(labels[: len(base)], labels0)
    assert np.array_equal(labels[len(base):] - labels0.max() - 1, mdav(inc, 5))


def test_empty_increment_returns_the_base():
    base, labels0, _ = split_data()
    for stage in STAGES:
        assert np.array_equal(run_stage(stage, base, labels0, np.empty((0, 3)), 5), labels0)


def test_increment_smaller_than_k_under_two_stage_is_adjoined():
    base, labels0, inc = split_data()
    small = inc[:3]
    labels = run_stage("two_stage", base, labels0, small, 5)
    assert labels.max() == labels0.max()  # no new cell
    assert np.array_equal(labels, run_stage("nn", base, labels0, small, 5))


@pytest.mark.parametrize("stage", STAGES)
def test_base_smaller_than_2k_runs_one_shot_on_the_union(stage):
    rng = np.random.default_rng(5)
    Z = rng.standard_normal((60, 2))
    base, inc = Z[:7], Z[7:]
    labels = run_stage(stage, base, np.zeros(7, dtype=np.int64), inc, 5)
    assert np.array_equal(labels, mdav(Z, 5))


@pytest.mark.parametrize("stage", STAGES)
def test_duplicates(stage):
    Z = np.repeat(np.random.default_rng(6).standard_normal((20, 2)), 15, axis=0)
    base, inc = Z[:200], Z[200:]
    labels = run_stage(stage, base, mdav(base, 5), inc, 5)
    assert np.bincount(labels).min() >= 5


def test_unknown_stage_and_parameter():
    base, labels0, inc = split_data()
    with pytest.raises(ParameterError, match="available incremental stages"):
        run_stage("nope", base, labels0, inc, 5)
    with pytest.raises(ParameterError, match="no parameter"):
        run_stage("nn", base, labels0, inc, 5, colour=1)
    with pytest.raises(ParameterError, match="index must be"):
        run_stage("nn", base, labels0, inc, 5, index="octree")


def test_two_stage_distortion_is_one_sse_over_the_release():
    Z = standardise(np.random.default_rng(8).standard_normal((300, 4)))
    result = TwoStageRun(k=5, incremental="nn_split_end").run(Z, n_base=240,
                                                              compare_one_shot=True)
    means = np.array([Z[result.labels == c].mean(axis=0) for c in range(result.labels.max() + 1)])
    from_scratch = float(((Z - means[result.labels]) ** 2).sum()) / float(
        ((Z - Z.mean(axis=0)) ** 2).sum())
    assert result.distortion == pytest.approx(from_scratch, rel=1e-12)
    assert result.distortion == pytest.approx(sse(Z, result.labels) / sst(Z), rel=1e-12)
    assert result.one_shot_distortion == pytest.approx(distortion(Z, mdav(Z, 5)))
    assert result.delta == pytest.approx(result.distortion / result.one_shot_distortion - 1)
    assert (result.n_base, result.n_increment, result.nu) == (240, 60, 0.2)
    report = result.report()
    assert report["tau_0"] == pytest.approx(result.base_seconds / result.one_shot_seconds)
    assert set(report) >= {"nu", "n_0", "n_plus", "tau_0", "tau_plus", "delta"}


def test_two_stage_run_with_a_tiny_base():
    Z = np.random.default_rng(9).standard_normal((40, 2))
    result = TwoStageRun(k=5).run(Z, n_base=3)
    assert np.array_equal(result.labels, mdav(Z, 5))


def test_split_by_ratio():
    assert split_by_ratio(1000, 0.1) == 900
    assert split_by_ratio(1000, 0.0) == 1000
    with pytest.raises(ParameterError):
        split_by_ratio(1000, 1.0)


# Survey size: a base of 10,000 and an increment of 2,000 records, 15 quasi-identifiers, k = 10.
# With 15 columns index="auto" takes the linear scan; the k-d tree is checked too. The late
# records have drifted by one standard deviation, so adjoining piles them into a few cells and
# the splitting stages really split (drawn like the base, no cell would reach 2k).
LARGE_K = 10


@pytest.fixture(scope="module")
def large_split():
    X = np.random.default_rng(2024).standard_normal((12_000, 15))
    X[10_000:] += 1.0
    Z = standardise(X)
    base, inc = Z[:10_000], Z[10_000:]
    return base, mdav(base, LARGE_K), inc


@pytest.fixture(scope="module")
def large_references() -> dict[str, np.ndarray]:
    """Oracle labels by stage, so the slow loop runs once per stage, not per variant."""
    return {}


@pytest.mark.parametrize("stage", STAGES)
def test_every_cell_has_k_and_every_record_one_cell_at_survey_size(stage, large_split):
    base, labels0, inc = large_split
    labels = run_stage(stage, base, labels0, inc, LARGE_K)
    assert labels.shape == (len(base) + len(inc),)
    assert labels.min() >= 0
    sizes = np.bincount(labels)
    assert sizes.sum() == len(labels) and (sizes > 0).all()
    assert sizes.min() >= LARGE_K


@pytest.mark.parametrize("stage", STAGES)
def test_deterministic_at_survey_size(stage, large_split):
    base, labels0, inc = large_split
    first = run_stage(stage, base, labels0, inc, LARGE_K)
    assert np.array_equal(run_stage(stage, base, labels0, inc, LARGE_K), first)


@pytest.mark.parametrize("stage", ["nn_split_mid", "nn_split_end"])
def test_split_stages_split_grown_cells_below_2k_at_survey_size(stage, large_split):
    base, labels0, inc = large_split
    labels = run_stage(stage, base, labels0, inc, LARGE_K)
    assert labels.max() > labels0.max()  # cells were split
    assert np.bincount(labels).max() < 2 * LARGE_K


@pytest.mark.parametrize("stage", ["nn", "nn_inertial"])
def test_adjoining_stages_keep_every_base_cell_at_survey_size(stage, large_split):
    base, labels0, inc = large_split
    labels = run_stage(stage, base, labels0, inc, LARGE_K)
    assert np.array_equal(labels[: len(base)], labels0)
    assert labels.max() == labels0.max()
    assert np.bincount(labels).max() >= 2 * LARGE_K  # without splitting, cells grow past 2k


@pytest.mark.parametrize("stage", sorted(NN_STAGES))
@pytest.mark.parametrize("index", ["auto", "kdtree", "blocks"])
def test_nn_stages_equal_a_plain_sequential_loop_at_survey_size(stage, index, large_split,
                                                                large_references):
    base, labels0, inc = large_split
    if stage not in large_references:
        large_references[stage] = reference_adjoin(base, labels0, inc, LARGE_K,
                                                   **NN_STAGES[stage])
    got = run_stage(stage, base, labels0, inc, LARGE_K, index=index)
    assert np.array_equal(got, large_references[stage])


def test_two_stage_equals_base_cells_then_reference_mdav_of_the_increment_at_survey_size(
        large_split):
    base, labels0, inc = large_split
    labels = run_stage("two_stage", base, labels0, inc, LARGE_K)
    expected = np.concatenate([labels0, reference_mdav(inc, LARGE_K) + labels0.max() + 1])
    assert np.array_equal(labels, expected)


def test_rows_that_follow_each_other_in_one_array_are_joined_without_a_copy():
    from streamanon.incremental.base import joined_rows

    buf = np.random.default_rng(0).normal(size=(12, 3))
    together = joined_rows(buf[:7], buf[7:10])
    assert np.shares_memory(together, buf) and together.flags.c_contiguous
    np.testing.assert_array_equal(together, buf[:10])
    # one row whose own stride is not a row's (numpy calls it contiguous): the rows after it
    np.testing.assert_array_equal(joined_rows(buf[0:3:3], buf[1:4]), buf[:4])
    for base, increment in [(buf[:7], buf[8:10]),  # a gap
                            (buf[7:10], buf[:7]),  # the other way round
                            (buf[:7], buf[7:10].copy()),  # another array
                            (buf[:7, :2], buf[7:10, :2])]:  # not contiguous
        joined = joined_rows(base, increment)
        assert not np.shares_memory(joined, buf)
        np.testing.assert_array_equal(joined, np.concatenate([base, increment]))


@pytest.mark.parametrize("stage", ["nn", "nn_split_end", "nn_split_mid", "nn_inertial",
                                   "two_stage"])
def test_a_stage_on_rows_of_one_array_gives_the_labels_of_separate_arrays(stage):
    Z = standardise(np.random.default_rng(4).normal(size=(700, 4)))
    buf = np.empty((1000, 4))
    buf[:700] = Z
    base_labels = mdav(Z[:560], 5)
    separate = run_stage(stage, Z[:560].copy(), base_labels, Z[560:].copy(), 5)
    together = run_stage(stage, buf[:560], base_labels, buf[560:700], 5)
    np.testing.assert_array_equal(together, separate)
    np.testing.assert_array_equal(buf[:700], Z)  # read, never written
