"""Redelivery is recognised by content identity (respondent pseudonym + digest of the stored
record), not by Kafka partition/offset: offsets that start again (a broker that lost its log,
a recreated topic, a new cluster) never make a fresh response look like a redelivery."""

from __future__ import annotations

import numpy as np
import pytest

from streamanon.service.ingest import process_batch
from streamanon.service.store import open_store, record_digest
from streamanon.service.validation import Message
from tests.service.collector.test_collector import body, make


def msgs(bodies, partition=0, start=0):
    return [Message("t", partition, start + i, None, b, 100.0) for i, b in enumerate(bodies)]


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 's.db'}")
    s.ensure_survey("s")
    yield s
    s.close()


@pytest.mark.parametrize("duplicates", ["reject", "allow"])
def test_fresh_responses_at_reused_offsets_are_stored(store, duplicates):
    _, validator = make(duplicates)
    first = process_batch(msgs([body(rid=f"A{i}", age=20 + i) for i in range(50)]),
                          validator, store, None)
    assert first.stored == 50
    # the broker lost its log: new responses arrive at the same partition and offsets
    second = process_batch(msgs([body(rid=f"B{i}", age=20 + i) for i in range(50)]),
                           validator, store, None)
    assert second.stored == 50 and second.redelivered == 0 and not second.rejected
    assert store.count("s") == 100


@pytest.mark.parametrize("duplicates", ["reject", "allow"])
def test_a_redelivery_at_other_offsets_is_recognised(store, duplicates):
    """The same responses replayed by the platform after an offset reset (other partition,
    other offsets) are redeliveries: stored once, counted, not dead-lettered."""
    _, validator = make(duplicates)
    bodies = [body(rid=f"A{i}", age=20 + i) for i in range(30)]
    assert process_batch(msgs(bodies), validator, store, None).stored == 30
    again = process_batch(msgs(bodies, partition=3, start=1000), validator, store, None)
    assert again.stored == 0 and again.redelivered == 30 and not again.rejected
    assert store.count("s") == 30


def test_duplicate_policy_still_applies_to_a_different_answer(store):
    _, validator = make("reject")
    process_batch(msgs([body(rid="A", age=30)]), validator, store, None)
    result = process_batch(msgs([body(rid="A", age=31), body(rid="A", age=30)], start=7),
                           validator, store, None)
    assert [r.reason for r in result.rejected] == ["duplicate_respondent"]
    assert result.redelivered == 1 and result.stored == 0


def test_allow_policy_keeps_different_answers_of_one_respondent(store):
    _, validator = make("allow")
    result = process_batch(msgs([body(rid="A", age=30), body(rid="A", age=31),
                                 body(rid="A", age=30)]), validator, store, None)
    assert result.stored == 2 and result.redelivered == 1
    assert sorted(store.load_records("s", 2).qi[:, 0].tolist()) == [30.0, 31.0]


def test_the_digest_covers_every_stored_part():
    qi = np.array([1.0, 2.0]).tobytes()
    base = record_digest(qi, '{"v":1}', "a")
    assert len(base) == 16
    assert record_digest(qi, '{"v":1}', "a") == base
    assert record_digest(np.array([1.0, 2.5]).tobytes(), '{"v":1}', "a") != base
    assert record_digest(qi, '{"v":2}', "a") != base
    assert record_digest(qi, '{"v":1}', None) != base
    assert record_digest(qi, '{"v":1}', "") != record_digest(qi, '{"v":1}', None)
    # parts are delimited: moving bytes from one part to the next changes the digest
    assert record_digest(qi, '{"v":1}a', "") != record_digest(qi, '{"v":1}', "a")
