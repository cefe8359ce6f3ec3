"""The records read ahead of the base snapshot, or of the close: what the base run (or the
release made whole at close) gets is what one read at its moment gives, however the reads ahead
were cut, and nothing is kept once the base run or the close has started or what was read has
been dropped."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

import streamanon.service.base_run as base_run
from streamanon.service.releasing import stored_records
from streamanon.service.runtime import ReadAhead
from streamanon.service.store import RecordRow, Records, SQLiteStore, record_digest

M = 3


def rows(n: int, start: int = 0) -> list[RecordRow]:
    out = []
    for i in range(start, start + n):
        qi = np.array([i, -i, i * 0.5], dtype=np.float64).tobytes()
        confidential = f'{{"v": {i}}}'
        label = None if i % 3 else f"L{i}"
        out.append(RecordRow(arrived_at=1000.0 + i, partition=i % 2, offset=i,
                             rid_hash=i.to_bytes(32, "big"),
                             digest=record_digest(qi, confidential, label), qi=qi,
                             confidential=confidential, label=label))
    return out


def store_with(tmp_path, n: int) -> SQLiteStore:
    store = SQLiteStore(str(tmp_path / "s.db"))
    store.ensure_survey("s")
    store.insert_records("s", rows(n))
    return store


def runtime() -> SimpleNamespace:
    config = SimpleNamespace(id="s", quasi_identifiers=["a", "b", "c"])
    return SimpleNamespace(config=config, read_ahead=ReadAhead(), base_task=None,
                           close_task=None)


async def direct(fn):
    return fn()


async def yes() -> bool:
    return True


def ahead_of(survey, store, cut=None, in_store=direct, still_open=yes, once=False):
    async def clean_cut() -> int:
        return store.max_seq("s") if cut is None else cut

    return base_run.read_ahead(survey, clean_cut=clean_cut, still_open=still_open, store=store,
                               in_store=in_store, once=once)


def same(a, b) -> None:
    assert np.array_equal(a.seq, b.seq) and a.seq.dtype == b.seq.dtype
    assert np.array_equal(a.arrived_at, b.arrived_at)
    assert np.array_equal(a.qi, b.qi) and a.qi.shape == b.qi.shape
    assert a.confidential == b.confidential and a.labels == b.labels


@pytest.mark.parametrize("step", [7, 1000])
def test_records_read_ahead_then_the_rest_are_the_snapshot_read_at_once(tmp_path, monkeypatch,
                                                                         step):
    monkeypatch.setattr(base_run, "READ_AHEAD_STEP", step)
    store = store_with(tmp_path, 40)
    survey = runtime()

    async def run():
        await ahead_of(survey, store)
        assert sum(len(p) for p in survey.read_ahead.parts) == 40
        store.insert_records("s", rows(25, start=40))
        await ahead_of(survey, store, cut=store.max_seq("s") - 5)
        assert sum(len(p) for p in survey.read_ahead.parts) == 60
        store.insert_records("s", rows(10, start=65))  # after the last read ahead
        snapshot = store.max_seq("s") - 2
        records, ahead = await stored_records(survey, snapshot, store=store, in_store=direct)
        return snapshot, records, ahead

    snapshot, records, ahead = asyncio.run(run())
    assert ahead == 60 and len(records) == 73
    same(records, store.load_records("s", M, upto_seq=snapshot))
    assert survey.read_ahead.parts == []  # taken by the base run, not kept


def test_a_read_ahead_past_the_snapshot_gives_its_first_records(tmp_path):
    store = store_with(tmp_path, 30)
    survey = runtime()

    async def run():
        await ahead_of(survey, store)
        return await stored_records(survey, 10, store=store, in_store=direct)

    records, ahead = asyncio.run(run())
    assert ahead == 10
    same(records, store.load_records("s", M, upto_seq=10))


@pytest.mark.parametrize("started", ["base_task", "close_task", "dropped"])
def test_nothing_is_kept_once_the_base_run_or_the_close_has_started_or_it_was_dropped(
        tmp_path, started):
    store = store_with(tmp_path, 30)
    survey = runtime()

    async def starts_during_the_read(fn):
        if started == "dropped":  # e.g. a base run or the release took what was read
            survey.read_ahead.drop()
        else:
            setattr(survey, started, object())  # started while the store was being read
        return fn()

    asyncio.run(ahead_of(survey, store, in_store=starts_during_the_read))
    assert survey.read_ahead.parts == [] and survey.read_ahead.cut == 0
    assert survey.read_ahead.task is None


def test_a_drop_while_the_cut_is_taken_keeps_nothing(tmp_path):
    """A base run that starts (and takes what was read) while the clean cut waits."""
    store = store_with(tmp_path, 30)
    survey = runtime()

    async def run():
        async def slow_cut() -> int:
            survey.read_ahead.drop()
            return store.max_seq("s")

        await base_run.read_ahead(survey, clean_cut=slow_cut, still_open=yes, store=store,
                                  in_store=direct)

    asyncio.run(run())
    assert survey.read_ahead.parts == []


def test_a_survey_no_longer_open_is_not_read_and_a_shared_store_is_cut_once(tmp_path):
    store = store_with(tmp_path, 30)
    survey = runtime()

    async def no() -> bool:
        return False

    asyncio.run(ahead_of(survey, store, still_open=no))
    assert survey.read_ahead.parts == []
    asyncio.run(ahead_of(survey, store, once=True))
    assert survey.read_ahead.cut == store.max_seq("s")
    store.insert_records("s", rows(5, start=30))
    asyncio.run(ahead_of(survey, store, once=True))  # another cut would lock a shared table
    assert survey.read_ahead.cut == store.max_seq("s") - 5


def test_a_failed_read_keeps_nothing_and_says_so(tmp_path, caplog):
    store = store_with(tmp_path, 30)
    survey = runtime()

    async def broken(fn):
        raise OSError("disk")

    asyncio.run(ahead_of(survey, store, in_store=broken))
    assert survey.read_ahead.parts == [] and survey.read_ahead.task is None
    assert "not read ahead" in caplog.text


def test_later_records_must_follow():  # out of order, they would not be the snapshot
    def records(seqs):
        n = len(seqs)
        return Records(seq=np.array(seqs, dtype=np.int64), arrived_at=np.zeros(n),
                       qi=np.zeros((n, M)), confidential=[{}] * n, labels=[None] * n)

    joined = Records.join([records([1, 2]), records([]), records([3])])
    assert list(joined.seq) == [1, 2, 3] and joined.seq.dtype == np.int64
    assert joined.qi.shape == (3, M)
    assert len(Records.join([records([1]), records([])])) == 1
    assert list(records([1, 4, 9]).upto(4).seq) == [1, 4]
    with pytest.raises(ValueError, match="follow"):
        Records.join([records([1, 5]), records([5, 6])])


def test_a_read_ahead_measures_the_share_the_base_engine_would_run_on(tmp_path):
    """Repeated keys: 30,000 records over 20 tuples and 40 records of their own; the engine
    would run on the 40 and what the 20 tuples may lend, and the planner is told so before
    the base run starts (streamanon.engines.distinct.work_share)."""
    from streamanon.engines.distinct import engine_rows

    rng = np.random.default_rng(0)
    tuples = rng.integers(0, 5, size=(20, M)).astype(float)
    codes = np.vstack([tuples[rng.integers(0, 20, size=30_000)],
                       rng.normal(10, 1, size=(40, M))])
    store = SQLiteStore(str(tmp_path / "s.db"))
    store.ensure_survey("s")
    store.insert_records("s", [
        RecordRow(arrived_at=1000.0 + i, partition=0, offset=i, rid_hash=i.to_bytes(32, "big"),
                  digest=record_digest(q.tobytes(), "{}", None), qi=q.tobytes(),
                  confidential="{}", label=None) for i, q in enumerate(codes)])
    survey = runtime()
    survey.config.k = 5
    said = []

    async def clean_cut() -> int:
        return store.max_seq("s")

    asyncio.run(base_run.read_ahead(survey, clean_cut=clean_cut, still_open=yes, store=store,
                                    in_store=direct, measured=said.append))
    assert said == [engine_rows(codes, 5) / len(codes)]
    assert 40 / len(codes) <= said[0] < 0.02


@pytest.mark.parametrize("step", [7, 1000])
def test_a_release_made_whole_at_close_takes_what_was_read_ahead_and_reads_the_rest(
        tmp_path, monkeypatch, step):
    """One-shot at close: the records read ahead of the close, then those stored since (the
    drain), are every record, as one read at the close gives them."""
    monkeypatch.setattr(base_run, "READ_AHEAD_STEP", step)
    store = store_with(tmp_path, 40)
    survey = runtime()

    async def run():
        await ahead_of(survey, store, cut=store.max_seq("s") - 3)
        assert sum(len(p) for p in survey.read_ahead.parts) == 37
        store.insert_records("s", rows(20, start=40))  # the rush before the close, drained
        return await stored_records(survey, store=store, in_store=direct)

    records, ahead = asyncio.run(run())
    assert ahead == 37 and len(records) == 60
    same(records, store.load_records("s", M))
    assert survey.read_ahead.parts == [] and survey.read_ahead.cut == 0  # taken, not kept


def test_a_release_with_nothing_read_ahead_reads_every_record(tmp_path):
    store = store_with(tmp_path, 25)
    survey = runtime()
    records, ahead = asyncio.run(stored_records(survey, store=store, in_store=direct))
    assert ahead == 0
    same(records, store.load_records("s", M))
