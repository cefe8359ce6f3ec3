"""``streamanon serve --embedded-broker`` stops the service and its broker on SIGTERM and
SIGHUP (issue 13), as ``streamanon broker`` does: a supervisor, ``timeout`` or a closed
terminal never leaves an orphaned Tansu process behind, whether the signal comes while the
service runs or while it is still starting."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.test_broker_command import _running, assert_gone, reaping, tansu_children
from tests.service.conftest import write_config
from tests.support.children import Lines

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("when", ["serving", "starting"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_serve_with_an_embedded_broker_stops_both_on(subprocesses, sig, when, tmp_path):
    config, env = write_config(tmp_path, "127.0.0.1:1")  # replaced by the embedded broker
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamanon", "serve", "--config", str(config),
         "--embedded-broker", "--log-level", "warning"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, text=True)
    tansu: list[int] = []
    with reaping(proc, tansu):
        lines = Lines(proc)
        line = lines.next()
        assert line.startswith("embedded broker at"), line + lines.rest()
        tansu += tansu_children(proc.pid)
        assert len(tansu) == 1 and _running(tansu[0])
        if when == "serving":
            line = lines.next()
            assert line.startswith("serving 1 survey(s)"), line + lines.rest()
        proc.send_signal(sig)
        status = proc.wait(timeout=45)
        output = lines.rest()
        assert status == 0, output
        assert "Traceback" not in output, output
        assert_gone(tansu[0], "the service")
