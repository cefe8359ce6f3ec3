"""SIGKILL the service mid-ingest and mid-base-run: every valid record is released once."""

from __future__ import annotations

import collections
import json
import sqlite3
import threading
import time

from tests.service.kafka_helpers import headers, produce, read_topic, response


def test_kill_during_ingest_and_during_base_run(service_factory, broker, tmp_path):
    svc = service_factory(k=5)
    svc.start()
    topic = f"{svc.prefix}.wellbeing.responses"
    n = 60_000
    producer = threading.Thread(target=produce, args=(
        broker.bootstrap, topic, [(None, response(i)) for i in range(n)]))
    producer.start()
    svc.wait_for("wellbeing", lambda s: s["stored"] > 5_000, what="some ingest")
    svc.kill()  # mid-ingest: batches in flight, offsets not all committed
    svc.start()
    producer.join()
    svc.wait_for("wellbeing", lambda s: s["stored"] >= n, timeout=300, what="full ingest")
    time.sleep(1.0)
    assert svc.survey("wellbeing")["stored"] == n  # nothing lost, nothing twice

    code, body = svc.post("/api/surveys/wellbeing/base")
    assert code == 202, body
    svc.kill()  # the base run has just started (state BASE_RUNNING, no checkpoint yet)
    svc.start()
    assert svc.survey("wellbeing")["state"] == "OPEN"  # interrupted run reset for re-planning
    code, _ = svc.post("/api/surveys/wellbeing/base")
    assert code == 202
    svc.wait_for("wellbeing", lambda s: s["state"] == "BASE_DONE", timeout=300, what="base")

    late = 500
    produce(broker.bootstrap, topic, [(None, response(n + i)) for i in range(late)])
    svc.wait_for("wellbeing", lambda s: s["stored"] == n + late, what="increment")
    svc.post("/api/surveys/wellbeing/close")
    status = svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", timeout=300,
                          what="release")
    assert status["release"]["mode"] == "two-stage"
    assert status["release"]["nu"] == late / (n + late)

    records = read_topic(broker.bootstrap, f"{svc.prefix}.wellbeing.release",
                         expected=n + late + 1, timeout=120)
    tickets = collections.Counter(json.loads(r.value)["ticket"] for r in records
                                  if headers(r)["streamanon-type"] == "record")
    assert tickets == collections.Counter(range(n + late))
    svc.stop()
    with sqlite3.connect(tmp_path / "store" / "streamanon.db") as db:
        notes = [row[0] for row in db.execute("SELECT note FROM transitions")]
    assert "base run interrupted; re-planning" in notes
