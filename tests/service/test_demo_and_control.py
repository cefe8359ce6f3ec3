"""The scheduled path (planner fires the base run, close at its time), the demo, and closing by
the CLI and by a control message."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from tests.service.kafka_helpers import produce, response


def test_demo_runs_the_scheduled_pipeline(tmp_path):
    out = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "streamanon", "demo", "--n", "4000", "--m", "4", "--k", "5",
         "--open-seconds", "15", "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((out / "demo" / "report.json").read_text())
    assert report["n"] == 4000  # every valid response; the malformed ones dead-lettered
    assert sum(report["rejected"].values()) == 4
    assert report["base_seconds"] > 0 and report["planned_nu"] is not None
    assert "predicted close -> release" in result.stdout
    assert "one-shot run would take" in result.stdout


def test_close_from_the_cli(service_factory, broker):
    svc = service_factory(k=3)
    svc.start()
    produce(broker.bootstrap, f"{svc.prefix}.wellbeing.responses",
            [(None, response(i)) for i in range(30)])
    svc.wait_for("wellbeing", lambda s: s["stored"] == 30, what="ingest")
    env = {**svc.env, "STREAMANON_HTTP_TOKEN": "wrong"}
    bad = subprocess.run([sys.executable, "-m", "streamanon", "close", "wellbeing",
                          "--config", str(svc.config)], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "HTTP 401" in bad.stderr
    ok = subprocess.run([sys.executable, "-m", "streamanon", "close", "wellbeing",
                         "--config", str(svc.config)], capture_output=True, text=True,
                        env=svc.env)
    assert ok.returncode == 0, ok.stderr
    svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", what="release")


def test_control_message_closes_and_bad_tokens_are_ignored(service_factory, broker):
    close = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    svc = service_factory(k=3, close=close)
    svc.start()
    produce(broker.bootstrap, f"{svc.prefix}.wellbeing.responses",
            [(None, response(i)) for i in range(30)])
    svc.wait_for("wellbeing", lambda s: s["stored"] == 30, what="ingest")
    control = f"{svc.prefix}.control"
    produce(broker.bootstrap, control, [(None, json.dumps(
        {"command": "close", "survey": "wellbeing", "token": "nope"}).encode())])
    produce(broker.bootstrap, control, [(None, b"garbage")])
    produce(broker.bootstrap, control, [(None, json.dumps(
        {"command": "close", "survey": "wellbeing", "token": svc.token}).encode())])
    status = svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", what="release")
    assert status["release"]["n"] == 30
    log = svc.log.read_text()
    assert "bad token" in log and "not {command, survey, token}" in log
