"""The base snapshot's records read ahead: what the base run gets is what one read of the
snapshot at its moment gives, however the reads ahead were cut, and nothing is kept once the
base run or the close has started."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

import streamanon.service.base_run as base_run
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
    return SimpleNamespace(config=config, preloaded=None, base_task=None, close_task=None)


async def direct(fn):
    return fn()


def same(a, b) -> None:
    assert np.array_equal(a.seq, b.seq)
    assert np.array_equal(a.arrived_at, b.arrived_at)
    assert np.array_equal(a.qi, b.qi) and a.qi.shape == b.qi.shape
    assert a.confidential == b.confidential and a.labels == b.labels


@pytest.mark.parametrize("step", [7, 1000])
def test_records_read_ahead_then_the_rest_are_the_snapshot_read_at_once(tmp_path, monkeypatch,
                                                                         step):
    monkeypatch.setattr(base_run, "READ_AHEAD_STEP", step)
    store = store_with(tmp_path, 40)
    rt = runtime()

    async def run():
        await base_run.read_ahead(rt, store.max_seq("s"), store=store, in_store=direct)
        assert rt.preloaded is not None and len(rt.preloaded[1]) == 40
        store.insert_records("s", rows(25, start=40))
        await base_run.read_ahead(rt, store.max_seq("s") - 5, store=store, in_store=direct)
        assert len(rt.preloaded[1]) == 60
        store.insert_records("s", rows(10, start=65))  # after the last read ahead
        snapshot = store.max_seq("s") - 2
        records, ahead = await base_run.snapshot_records(rt, snapshot, store=store,
                                                         in_store=direct)
        return snapshot, records, ahead

    snapshot, records, ahead = asyncio.run(run())
    assert ahead == 60 and len(records) == 73
    same(records, store.load_records("s", M, upto_seq=snapshot))
    assert rt.preloaded is None  # taken by the base run, not kept


def test_a_read_ahead_past_the_snapshot_is_not_used(tmp_path):
    store = store_with(tmp_path, 30)
    rt = runtime()

    async def run():
        await base_run.read_ahead(rt, store.max_seq("s"), store=store, in_store=direct)
        return await base_run.snapshot_records(rt, 10, store=store, in_store=direct)

    records, ahead = asyncio.run(run())
    assert ahead == 0
    same(records, store.load_records("s", M, upto_seq=10))


@pytest.mark.parametrize("started", ["base_task", "close_task"])
def test_nothing_is_kept_once_the_base_run_or_the_close_has_started(tmp_path, started):
    store = store_with(tmp_path, 30)
    rt = runtime()

    async def starts_during_the_read(fn):
        setattr(rt, started, object())  # started while the store was being read
        return fn()

    asyncio.run(base_run.read_ahead(rt, store.max_seq("s"), store=store,
                                    in_store=starts_during_the_read))
    assert rt.preloaded is None


def test_later_records_must_follow():  # out of order, they would not be the snapshot
    def records(seqs):
        n = len(seqs)
        return Records(seq=np.array(seqs, dtype=np.int64), arrived_at=np.zeros(n),
                       qi=np.zeros((n, M)), confidential=[{}] * n, labels=[None] * n)

    assert len(records([1, 2]).then(records([3]))) == 3
    assert len(records([]).then(records([3]))) == 1
    with pytest.raises(ValueError, match="follow"):
        records([1, 5]).then(records([5, 6]))
