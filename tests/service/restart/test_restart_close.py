"""A close after a restart (issue 13, finding 2): the drain works from the group's committed
offsets and the partitions' end offsets, not from what the collector has seen since it started,
and a survey left CLOSING is taken up again before the collector has joined its group."""

from __future__ import annotations

import json

import pytest

from streamanon.service.states import CLOSING
from streamanon.service.store import open_store
from tests.service.kafka_helpers import produce, read_topic, release_kind, response
from tests.service.restart_helpers import evict_group

# the compatibility subset: each test on Apache Kafka and on the embedded broker
pytestmark = pytest.mark.both_brokers

N = 300


def restart(svc, bootstrap: str) -> None:
    """Start the stopped service again, after removing what the broker would otherwise keep
    in the collector group for a session timeout (10 s with these tests' configuration)."""
    evict_group(bootstrap, f"{svc.prefix}-collector")
    svc.start()


def manifests(bootstrap: str, topic: str, count: int) -> list[dict]:
    records = read_topic(bootstrap, topic, expected=count + 1, timeout=30)
    return [json.loads(r.value) for r in records if release_kind(r) == "manifest"]


def ingested_then_stopped(service_factory, broker):
    """A service that stored N responses, then stopped gracefully (every offset committed)."""
    svc = service_factory(k=5)
    svc.start()
    produce(broker.bootstrap, f"{svc.prefix}.wellbeing.responses",
            [(None, response(i)) for i in range(N)])
    svc.wait_for("wellbeing", lambda s: s["stored"] == N, what="ingest")
    svc.stop()
    return svc


def test_a_close_after_a_graceful_restart_needs_no_new_message(service_factory, broker):
    svc = ingested_then_stopped(service_factory, broker)
    restart(svc, broker.bootstrap)  # every offset is committed; no message will come
    code, _ = svc.post("/api/surveys/wellbeing/close")
    assert code == 202
    svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", timeout=60, what="release")
    [manifest] = manifests(broker.bootstrap, f"{svc.prefix}.wellbeing.release", N)
    assert manifest["count"] == N


def test_a_survey_left_closing_is_released_when_the_service_comes_back(service_factory, broker,
                                                                       tmp_path):
    svc = ingested_then_stopped(service_factory, broker)
    store = open_store(f"sqlite:///{tmp_path / 'store' / 'streamanon.db'}")
    store.request_close("wellbeing")  # what a service killed in the middle of a close leaves
    store.transition("wellbeing", CLOSING, "closing")
    store.close()
    restart(svc, broker.bootstrap)  # the close resumes while the collector joins its group
    status = svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED" or s["error"],
                          timeout=60, what="release")
    assert status["error"] is None and status["state"] == "RELEASED"
    [manifest] = manifests(broker.bootstrap, f"{svc.prefix}.wellbeing.release", N)
    assert manifest["count"] == N
