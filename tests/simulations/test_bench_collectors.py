"""Smoke test of simulations/bench_collectors.py: a tiny run prints its table; an instance's
share is asked for once it serves."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time

import pytest

from simulations import bench_collectors
from simulations.postgres import why_unavailable
from streamanon.service.broker import free_port


def test_help_describes_the_benchmark(capsys):
    with pytest.raises(SystemExit):
        bench_collectors.parse_args(["--help"])
    assert "two service instances sharing one PostgreSQL" in capsys.readouterr().out


def test_a_tiny_run_prints_the_table(subprocesses, capsys):
    if why_unavailable():  # `make test` installs Debian's postgresql; never skip silently
        pytest.fail(f"PostgreSQL is needed: {why_unavailable()}")
    assert bench_collectors.main(["--n", "2000", "--repeat", "1", "--instances", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert "| instances | records/s (median) | ratio to one |" in out
    rows = [line for line in out.splitlines() if line.startswith("| 1 |")
            or line.startswith("| 2 |")]
    assert len(rows) == 2
    assert "cores: PostgreSQL" in out and "cores: broker (Tansu)" in out


def test_the_status_of_an_instance_still_starting_is_awaited(subprocesses):
    """CI failed once: the backlog of a tiny run was stored before the second instance's HTTP
    server was up, and the bench asked it for its share at once (connection refused)."""
    port = free_port()

    class Status(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"surveys": [{"stored": 7}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Status, bind_and_activate=False)
    serving = threading.Event()

    def late():
        time.sleep(1.0)
        server.server_bind()
        server.server_activate()
        serving.set()
        server.serve_forever()

    thread = threading.Thread(target=late, daemon=True)
    thread.start()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        status = bench_collectors.status_when_ready(port, alive, time.monotonic() + 20)
        assert status["surveys"][0]["stored"] == 7
    finally:
        if serving.is_set():  # shutdown() waits for serve_forever(), which may never have run
            server.shutdown()
        server.server_close()
        alive.kill()
        alive.wait()


def test_an_instance_that_died_is_reported_not_awaited(subprocesses, monkeypatch):
    def no_wait(seconds):
        raise AssertionError("waited for an instance that had exited")

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    monkeypatch.setattr(bench_collectors.time, "sleep", no_wait)
    with pytest.raises(RuntimeError, match="exited"):
        bench_collectors.status_when_ready(free_port(), dead, time.monotonic() + 600)
