"""MDAV: identical to the plain oracle, the cell-size invariants, and the published IL."""

from __future__ import annotations

import numpy as np
import pytest

from streamanon.engines import mdav as mdav_module
from streamanon.engines import run_engine
from streamanon.engines.mdav import mdav
from streamanon.metrics import information_loss, standardise
from tests.reference_mdav import reference_mdav

# (n, m, k): n < 2k, n between 2k and 3k, n < 3k, k = 1 and 2, and ordinary cases.
SHAPES = [
    (1, 1, 1),
    (2, 3, 1),
    (7, 2, 1),
    (9, 2, 5),
    (12, 3, 5),
    (14, 3, 5),
    (5, 4, 2),
    (31, 3, 2),
    (60, 1, 3),
    (100, 5, 10),
    (257, 15, 10),
    (300, 4, 7),
    (400, 2, 3),
    (503, 8, 25),
]


@pytest.fixture(params=["serial", "parallel"])
def scan_mode(request, monkeypatch):
    """Run each case with the multi-threaded scan forced on, and with it off."""
    monkeypatch.setattr(mdav_module, "_MIN_PARALLEL", 0 if request.param == "parallel" else 10**9)
    return request.param


@pytest.fixture(scope="module")
def reference_partitions() -> dict[object, np.ndarray]:
    """Oracle partitions by case, so the slow reference runs once per case, not per variant."""
    return {}


def cached_reference(cache: dict[object, np.ndarray], case: object, X: np.ndarray,
                     k: int) -> np.ndarray:
    if case not in cache:
        cache[case] = reference_mdav(X, k)
    return cache[case]


@pytest.fixture
def kernel_stats(monkeypatch):
    """Counters of every compiled MDAV run: the far-list length it was given and its ``stats``."""
    calls = []
    kernel = mdav_module.mdav_labels

    def spy(X, k, screen, n_threads, far_list_len, min_parallel, stats, progress):
        labels = kernel(X, k, screen, n_threads, far_list_len, min_parallel, stats, progress)
        calls.append({"far_list_len": far_list_len, "rebuilds": int(stats[0]),
                      "walk_distances": int(stats[1]), "nearest_fallbacks": int(stats[2])})
        return labels

    monkeypatch.setattr(mdav_module, "mdav_labels", spy)
    return calls


@pytest.mark.parametrize("n,m,k", SHAPES)
@pytest.mark.parametrize("screen", [True, False])
def test_partition_equals_reference_on_continuous_data(n, m, k, screen, scan_mode):
    X = standardise(np.random.default_rng(n * 1000 + m * 10 + k).standard_normal((n, m)))
    expected = reference_mdav(X, k)
    assert np.array_equal(mdav(X, k, screen=screen), expected)


@pytest.mark.parametrize("seed", range(6))
def test_partition_equals_reference_with_ties_and_duplicates(seed, scan_mode):
    rng = np.random.default_rng(seed)
    n, m, k = int(rng.integers(30, 400)), int(rng.integers(1, 6)), int(rng.integers(2, 8))
    X = np.round(rng.standard_normal((n, m)) * 1.5)  # few distinct values: many exact ties
    X[rng.integers(0, n, n // 4)] = X[0]  # and many exact duplicates of one record
    assert np.array_equal(mdav(X, k), reference_mdav(X, k))


def test_partition_equals_reference_when_candidates_overflow():
    """3,000 copies of three points overflow the screening buffers: the exact fallback runs."""
    rng = np.random.default_rng(7)
    X = np.repeat(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 5.0]]), 3000, axis=0)
    X = X[rng.permutation(len(X))]
    assert np.array_equal(mdav(X, 4), reference_mdav(X, 4))


def test_constant_column_changes_nothing():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((200, 3))
    with_constant = np.column_stack([X, np.zeros(200)])
    assert np.array_equal(mdav(with_constant, 5), mdav(X, 5))


def test_all_records_identical():
    X = np.zeros((50, 3))
    assert np.array_equal(mdav(X, 4), reference_mdav(X, 4))


def test_float32_input_gives_the_float64_partition():
    X = np.random.default_rng(5).standard_normal((300, 4)).astype(np.float32)
    labels = run_engine("mdav", X, 6)
    assert np.array_equal(labels, reference_mdav(X.astype(np.float64), 6))


@pytest.mark.parametrize("n,k", [(2_000, 3), (20_000, 10), (30_000, 100)])
def test_screened_threaded_equals_exact_scan_on_larger_data(n, k, monkeypatch):
    """Beyond the oracle's reach: the pruned, threaded kernel against the unpruned exact scan."""
    X = standardise(np.random.default_rng(n).standard_normal((n, 15)))
    exact = mdav(X, k, screen=False, n_threads=1)
    monkeypatch.setattr(mdav_module, "_MIN_PARALLEL", 0)
    assert np.array_equal(mdav(X, k, screen=True, n_threads=2), exact)


@pytest.mark.parametrize("n,k", [(1, 1), (9, 5), (10, 5), (14, 5), (15, 5), (1000, 7), (5000, 10)])
def test_every_cell_has_at_least_k_and_sizes_follow_mdav(n, k):
    labels = mdav(np.random.default_rng(n).standard_normal((n, 3)), k)
    sizes = np.bincount(labels)
    assert labels.shape == (n,)  # every record has exactly one cell
    assert sizes.sum() == n and (sizes > 0).all()
    assert sizes.min() >= k
    assert (sizes[:-1] == k).all()  # all cells of k but the last
    assert sizes[-1] < 2 * k or len(sizes) == 1


def test_deterministic():
    X = np.random.default_rng(11).standard_normal((3000, 6))
    first = mdav(X, 5)
    for _ in range(3):
        assert np.array_equal(mdav(X, 5), first)


def test_progress_reaches_total():
    from streamanon.progress import Progress

    progress = Progress()
    mdav(np.random.default_rng(1).standard_normal((500, 2)), 5, progress=progress)
    assert progress.done == progress.total == 500


# Published MDAV information loss, tests/data/README.md (and docs/design/references.md).
PUBLISHED_IL = {
    "census": {3: 5.69, 5: 9.09, 10: 14.16},
    "tarragona": {3: 16.93, 5: 22.46, 10: 33.19},
    "eia": {3: 0.48, 5: 1.67, 10: 3.84},
}


@pytest.mark.parametrize("dataset", sorted(PUBLISHED_IL))
@pytest.mark.parametrize("k", [3, 5, 10])
def test_information_loss_matches_published_value(benchmark_data, dataset, k):
    Z = standardise(benchmark_data[dataset])
    il = information_loss(Z, run_engine("mdav", Z, k))
    assert round(il, 2) == PUBLISHED_IL[dataset][k]


# Labels number cells in order of creation in both the engine and the oracle, so equal label
# arrays is the strict form of "same partition".
@pytest.mark.parametrize("dataset", sorted(PUBLISHED_IL))
@pytest.mark.parametrize("k", [3, 5, 10])
def test_partition_equals_reference_on_every_benchmark_case(benchmark_data, dataset, k,
                                                            scan_mode, reference_partitions):
    Z = standardise(benchmark_data[dataset])
    expected = cached_reference(reference_partitions, (dataset, k), Z, k)
    assert np.array_equal(run_engine("mdav", Z, k), expected)


def r_choices_above(n: int, k: int, list_len: int) -> int:
    """How many times MDAV picks a record r while more than ``list_len`` records remain."""
    return len(range(n, list_len, -2 * k))


# Above the kernel's far-list length the list of records farthest from the centroid is cut
# short, and a walk must prove its answer against the distance of the first record left out.
@pytest.mark.parametrize("n,m,k", [
    pytest.param(12_000, 15, 10, marks=pytest.mark.heavy), (3_000, 5, 3),
    pytest.param(12_000, 4, 5, marks=pytest.mark.heavy)])
@pytest.mark.parametrize("screen", [True, False])
def test_partition_equals_reference_on_large_data_with_the_far_list_cut_short(
        n, m, k, screen, scan_mode, reference_partitions, kernel_stats):
    X = standardise(np.random.default_rng(n + m + k).standard_normal((n, m)))
    expected = cached_reference(reference_partitions, (n, m, k), X, k)
    assert np.array_equal(mdav(X, k, screen=screen), expected)
    (run,) = kernel_stats
    assert n > run["far_list_len"]
    # Each r is found by walking the current list or by rebuilding it; fewer rebuilds than r
    # choices made above the list length means some r came from a walk of a cut-short list.
    assert 1 <= run["rebuilds"] < r_choices_above(n, k, run["far_list_len"])
    assert run["walk_distances"] > 0
    if screen:  # the quantised pre-filter, not the exact scan, chose some of the cells
        assert run["nearest_fallbacks"] < n // k
