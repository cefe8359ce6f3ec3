"""The scheduled path (planner fires the base run, close at its time), the demo, and closing by
the CLI and by a control message."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone

from streamanon.broker import free_port
from tests.service.kafka_helpers import produce, response


def test_demo_runs_the_scheduled_pipeline(tmp_path):
    """The demo end to end, with its dashboard served while it runs and lingering after the
    release, and JSON logs that name survey and state but hold no respondent data."""
    out = tmp_path / "demo"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamanon", "demo", "--n", "4000", "--m", "4", "--k", "5",
         "--open-seconds", "15", "--out", str(out), "--http", f"127.0.0.1:{port}",
         "--linger", "30", "--log-level", "info", "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        status = None
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status",
                                            timeout=5) as r:
                    status = json.loads(r.read())["surveys"][0]
                if status["state"] == "RELEASED":
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert status is not None and status["state"] == "RELEASED", status
        # still served after the release (--linger): page, status and metrics
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert b"streamanon" in r.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        assert 'streamanon_records_stored_total{survey="demo"} 4000.0' in metrics
        assert 'streamanon_releases_published_total{survey="demo"} 1.0' in metrics
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout + stderr
    report = json.loads((out / "demo" / "report.json").read_text())
    assert report["n"] == 4000  # every valid response; the malformed ones dead-lettered
    assert sum(report["rejected"].values()) == 4
    assert report["base_seconds"] > 0 and report["planned_nu"] is not None
    assert "predicted close -> release" in stdout
    assert "one-shot run would take" in stdout
    assert f"dashboard at http://127.0.0.1:{port}/" in stdout
    logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    transitions = [(e["from_state"], e["state"]) for e in logs
                   if e.get("survey") == "demo" and "from_state" in e]
    assert transitions == [("OPEN", "BASE_RUNNING"), ("BASE_RUNNING", "BASE_DONE"),
                           ("BASE_DONE", "CLOSING"), ("CLOSING", "RELEASED")]
    assert all({"ts", "level", "logger", "message"} <= set(e) for e in logs)
    assert "R000" not in stderr  # no respondent id in any log line


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
