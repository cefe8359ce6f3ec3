"""Review of issue 17 (the spliced release, the librdkafka release publisher): each test
failed on the code as reviewed, before its fix."""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pandas as pd
import pytest

from streamanon.errors import PublishError
from streamanon.io import write_table
from streamanon.release import prepare_stored, release_prepared
from streamanon.service.config import parse_config
from streamanon.service.publisher import ReleasePublisher, records_frame
from streamanon.service.store import Records
from streamanon.splicing import prepare_base, record_messages, splice

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
K = 4


def _survey():
    return parse_config({"kafka": {"bootstrap_servers": "127.0.0.1:1"}, "surveys": [
        {"id": "s1", "k": K, "schema": {
            "rid": {"role": "identifier"},
            "age": {"role": "quasi_identifier"},
            "income": {"role": "quasi_identifier"},
            # a float answer: the collector stores JSON 3 as the int 3 (validation allows
            # int and float for a float field and keeps the value as sent)
            "score": {"role": "confidential", "type": "float"}}}]}, ENV).surveys[0]


def _records(rng: np.random.Generator, n: int, scores: list[Any]) -> Records:
    qi = np.column_stack([rng.integers(18, 90, n), rng.normal(30000, 5000, n)]).astype(float)
    return Records(seq=np.arange(n), arrived_at=np.zeros(n), qi=np.ascontiguousarray(qi),
                   confidential=[{"score": s} for s in scores], labels=[None] * n)


def test_spliced_messages_are_the_rows_of_the_release_when_a_late_value_widens_a_column(
        tmp_path):
    """The base release's messages are serialised from the base snapshot's frame, whose
    column dtypes are inferred from the base records alone. When a late record widens a
    column (every base score an integral JSON number, a late one 2.5: int64 -> float64), the
    reused base messages say ``"score":3`` while the released table, its Parquet file, a
    release made from scratch and the resend after a restart (made from the file) all say
    ``3.0``: the published bytes depend on whether the release was spliced, and the messages
    are no longer the rows of the file their manifest's checksum names."""
    sc = _survey()
    rng = np.random.default_rng(5)
    n_base, n_late = 40, 8
    base_records = _records(rng, n_base, [int(v) for v in rng.integers(0, 10, n_base)])
    late_records = _records(rng, n_late, [2.5] * n_late)
    base_frame = records_frame(base_records, sc)  # as Service._base makes it
    frame = pd.concat([base_frame, records_frame(late_records, sc)],  # as Releaser.write
                      ignore_index=True)
    base_labels = np.arange(n_base) // K
    labels = np.concatenate([base_labels, base_labels.max() + 1 + np.arange(n_late) // K])
    base = prepare_base(base_frame, prepare_stored(base_frame, sc.schema, K), base_labels, K,
                        seed=1)
    own = prepare_stored(frame, sc.schema, K)
    release, messages, order = splice(base, frame, own, labels, K, seed=2)

    scratch = release_prepared(frame, own, labels, K, seed=None, shuffle=False)
    from_scratch = record_messages(scratch.table.iloc[order].reset_index(drop=True))
    write_table(release.table, tmp_path / "release.parquet")
    from_file = record_messages(pd.read_parquet(tmp_path / "release.parquet"))  # a restart
    sent = list(messages)
    assert sent == record_messages(release.table)
    assert sent == from_file
    assert sent == from_scratch


class _Error:
    def __init__(self, text: str) -> None:
        self.text = text

    def str(self) -> str:  # confluent_kafka.KafkaError's accessor
        return self.text


class _FakeProducer:
    """librdkafka's Producer as ReleasePublisher uses it: produce queues, flush delivers
    (calling the delivery callback for a failed message, as librdkafka does from flush),
    ``during_flush`` runs something at the point where another thread would run."""

    def __init__(self, publisher: ReleasePublisher, fail: set[bytes]) -> None:
        self.publisher = publisher
        self.fail = fail
        self.queue: list[tuple[str, bytes]] = []
        self.topics: dict[str, list[bytes]] = {}
        self.during_flush: Any = None

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None,
                partition: int = -1, headers: Any = None) -> None:  # librdkafka's order
        self.queue.append((topic, value))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        queued, self.queue = self.queue, []
        for topic, value in queued:
            if value in self.fail:
                self.publisher._delivered(_Error("Broker: Message size too large"), None)
            else:
                self.topics.setdefault(topic, []).append(value)
        hook, self.during_flush = self.during_flush, None
        if hook is not None:
            hook()
        return 0

    def purge(self, *args: Any, **kwargs: Any) -> None:
        self.queue.clear()


def test_a_concurrent_publish_of_another_survey_does_not_hide_a_delivery_failure():
    """ReleasePublisher is one per service and Releaser.publish runs it in a thread per
    survey (asyncio.to_thread): two surveys closing together publish concurrently. With one
    list of delivery errors on the shared publisher, cleared at the start of every publish,
    an error of survey A's record reported while A waits in its flush was erased when survey
    B's publish started: A saw no error and its manifest went out after a run that lacks a
    record, a silent loss. Now a publish waits for the one under way."""
    publisher = ReleasePublisher(parse_config(
        {"kafka": {"bootstrap_servers": "127.0.0.1:1"}, "surveys": [
            {"id": "s1", "k": K, "schema": {"rid": {"role": "identifier"},
                                             "age": {"role": "quasi_identifier"}}}]},
        ENV), timeout=1.0)
    fake = _FakeProducer(publisher, fail={b'{"a":1}'})
    publisher._producer = fake  # no broker: the producer is faked
    a = [b'{"a":0}', b'{"a":1}', b'{"a":2}']
    b = [b'{"b":0}']
    other = threading.Thread(
        target=lambda: publisher.publish("b.release", b, {"release_id": "rb"}))

    def b_starts() -> None:  # while A's flush is under way, survey B's publish starts
        other.start()
        other.join(timeout=0.5)  # B runs now unless it waits for A

    fake.during_flush = b_starts
    with pytest.raises(PublishError):  # A's failure reported: A is sent again
        publisher.publish("a.release", a, {"release_id": "ra"})
    other.join(timeout=10)
    assert not other.is_alive()
    assert fake.topics["b.release"] == [*b, fake.topics["b.release"][-1]]  # B went out whole
    assert json.loads(fake.topics["b.release"][-1])["release_id"] == "rb"
    assert not any(json.loads(v).get("release_id") == "ra"
                   for v in fake.topics.get("a.release", []))  # no manifest for A's cut run


def test_base_messages_are_not_reused_when_a_column_changed_its_json_kind():
    """The guard behind the fix above, for any column whose type the late records change
    (here a label-like text column that a frame built elsewhere made numeric): the base
    messages are then made again, and the messages stay the rows of the release."""
    sc = _survey()
    rng = np.random.default_rng(6)
    base_records = _records(rng, 40, [1.0] * 40)
    frame_base = records_frame(base_records, sc).assign(extra=np.arange(40))  # int
    late = records_frame(_records(rng, 8, [1.0] * 8), sc).assign(extra=np.full(8, 0.5))
    frame = pd.concat([frame_base, late], ignore_index=True)  # extra: float now
    base_labels = np.arange(40) // K
    labels = np.concatenate([base_labels, base_labels.max() + 1 + np.arange(8) // K])
    base = prepare_base(frame_base, prepare_stored(frame_base, sc.schema, K), base_labels, K)
    release, messages, _ = splice(base, frame, prepare_stored(frame, sc.schema, K), labels, K)
    assert list(messages) == record_messages(release.table)
