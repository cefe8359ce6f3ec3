"""KoboToolbox's REST Services against a running service on the embedded broker: submissions
posted with HTTP Basic auth, retried, refused and invalid, then one k-anonymous release."""

from __future__ import annotations

import collections
import json
import urllib.error
import urllib.request

import pandas as pd
import pytest

from streamanon.metrics import check_k_anonymity
from tests.service.conftest import ServiceProcess, services, write_config
from tests.service.kafka_helpers import headers, read_release, read_topic
from tests.service.webhook_helpers import PASSWORD, SCHEMA, basic, submission, webhook_section

QI = ["household/age", "household/size", "education"]


def configure(tmp, bootstrap, **kwargs):
    path, env = write_config(tmp, bootstrap, survey="hh", schema=SCHEMA + webhook_section(),
                             **kwargs)
    return path, {**env, "STREAMANON_WEBHOOK_PASSWORD": PASSWORD}


@pytest.fixture
def kobo_service(tmp_path, broker, subprocesses):
    yield from services(tmp_path, broker, ServiceProcess, configure)


def post(svc, body: bytes, auth: str | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"{svc.http}/api/surveys/hh/submissions", data=body, method="POST",
        headers={"Content-Type": "application/json",
                 **({"Authorization": auth} if auth else {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_kobo_submissions_are_stored_once_and_released(kobo_service, broker):
    svc = kobo_service(k=5)
    svc.start()
    n = 60
    bodies = [json.dumps(submission(i)).encode() for i in range(n)]
    assert [post(svc, b, basic())[0] for b in bodies] == [202] * n
    # KoboToolbox re-sends a push it thinks failed: accepted, stored once
    assert [post(svc, b, basic())[0] for b in bodies[:5]] == [202] * 5
    assert post(svc, bodies[0], basic(password="wrong"))[0] == 401
    assert post(svc, bodies[0])[0] == 401
    invalid = {"out_of_bounds": submission(900, **{"household/age": "130"}),
               "wrong_type": submission(901, **{"household/size": "many"})}
    for reason, body in invalid.items():
        status, answer = post(svc, json.dumps(body).encode(), basic())
        assert status == 422 and answer["reason"] == reason
    assert post(svc, b"{" + b" " * (2 * 1024 * 1024) + b"}", basic())[0] == 413
    status = svc.wait_for("hh", lambda s: s["stored"] == n and s["redelivered"] == 5,
                          what="the submissions stored once")
    assert sum(status["dead_lettered"].values()) == 0  # refused at the door, not later
    dead = read_topic(broker.bootstrap, f"{svc.prefix}.hh.deadletter", expected=2)
    assert sorted(headers(r)["streamanon-reason"] for r in dead) == sorted(invalid)
    assert sorted(json.loads(r.value)["_id"] for r in dead) == [1900, 1901]  # as sent

    with urllib.request.urlopen(f"{svc.http}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    for outcome, count in (("accepted", 65), ("unauthorized", 2), ("invalid", 2),
                           ("too_large", 1)):
        assert (f'streamanon_webhook_submissions_total{{outcome="{outcome}",survey="hh"}} '
                f'{count:.1f}') in metrics, outcome

    assert svc.post("/api/surveys/hh/close")[0] == 202
    svc.wait_for("hh", lambda s: s["state"] == "RELEASED", what="the release")
    _, rows, manifest = read_release(broker.bootstrap, f"{svc.prefix}.hh.release")
    assert manifest["count"] == len(rows) == n
    frame = pd.DataFrame(rows)
    assert "instanceID" not in frame and "_uuid" not in frame
    levels = {"primary": 0, "secondary": 1, "tertiary": 2}
    codes = frame[QI].replace(levels).to_numpy(dtype=float)
    assert check_k_anonymity(codes, 5).ok
    sent = [submission(i) for i in range(n)]
    assert collections.Counter(r["satisfaction"] for r in rows) == collections.Counter(
        int(s["satisfaction"]) for s in sent)
    assert collections.Counter(r["services/gas"] for r in rows) == collections.Counter(
        "gas" in s["services"].split() for s in sent)
