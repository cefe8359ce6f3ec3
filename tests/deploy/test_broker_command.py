"""``streamanon broker`` stops its broker on SIGTERM and SIGHUP as on Ctrl-C (issue 13): a
supervisor, a terminal closing or ``timeout`` never leaves an orphaned Tansu process behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamanon.service.broker import free_port
from tests.support.children import Lines

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def tansu_children(pid: int) -> list[int]:
    """The Tansu broker processes ``pid`` started."""
    return [child for child in _children(pid)
            if "tansu" in Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace")]


@contextlib.contextmanager
def reaping(proc: subprocess.Popen, tansu: list[int]) -> Iterator[None]:
    """Whatever the test finds, leave neither ``proc`` nor the brokers in ``tansu`` (filled
    in by the test) running."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in tansu:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def assert_gone(pid: int, what: str) -> None:
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid), f"the broker outlived {what}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.parametrize("ignored", [False, True])
def test_the_broker_command_stops_its_broker_on(subprocesses, sig, ignored):
    """Also when started with SIGINT ignored, as a background job of a script is (CI's own
    launch failed this way: the command never saw the SIGINT)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamanon", "broker", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, text=True,
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
                            if ignored else None)
    tansu: list[int] = []
    with reaping(proc, tansu):
        lines = Lines(proc)
        line = lines.next()
        assert f"127.0.0.1:{port}" in line, line + lines.rest()
        tansu += tansu_children(proc.pid)
        assert len(tansu) == 1 and _running(tansu[0])
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        assert_gone(tansu[0], "the command")


def test_a_signal_right_after_the_ready_line_still_stops_cleanly(monkeypatch, capsys):
    """The ready line is what a supervisor (or a test) waits for before it signals: a signal
    that lands while that line is being printed stops the broker and exits 0, as one that
    lands a second later does (it once escaped as exit 130: the line was printed before the
    ``try``)."""
    import argparse

    from streamanon.cli import serve as cli_serve

    class FakeBroker:
        stopped = False

        def __init__(self, port=None):
            self.bootstrap = f"127.0.0.1:{port}"
            self.process = self

        def poll(self):
            return None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            FakeBroker.stopped = True

    def print_then_interrupted(*args, **kwargs):
        if "embedded broker" in " ".join(map(str, args)):
            raise KeyboardInterrupt  # the signal's handler runs as the write returns
        print(*args, **kwargs)

    monkeypatch.setattr("streamanon.service.broker.EmbeddedBroker", FakeBroker)
    monkeypatch.setattr(cli_serve, "_stop_on_signals", lambda: None)
    monkeypatch.setattr(cli_serve, "print", print_then_interrupted, raising=False)
    assert cli_serve.cmd_broker(argparse.Namespace(port=9)) == 0
    assert FakeBroker.stopped


def test_a_silent_child_is_asked_for_its_stacks_and_the_test_shows_them(subprocesses):
    """``kill -USR1`` makes a running ``streamanon`` command print each thread's stack and go
    on; the tests' line reader uses it, so a child stuck before its next line fails the test
    with the place it was stuck (once a readline waited 15 minutes and showed nothing)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamanon", "broker", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT, text=True)
    tansu: list[int] = []
    with reaping(proc, tansu):
        lines = Lines(proc, seconds=30)
        assert f"127.0.0.1:{port}" in lines.next()
        tansu += tansu_children(proc.pid)
        proc.send_signal(signal.SIGUSR1)  # a dump, and the command goes on
        dump = lines.next() + lines.rest(3.0)
        assert "Thread 0x" in dump and "cmd_broker" in dump, dump
        assert proc.poll() is None
        lines.seconds = 1.0  # the broker command prints nothing more: the reader gives up
        with pytest.raises(AssertionError, match="printed nothing for 1 s") as stuck:
            lines.next()
        assert "cmd_broker" in str(stuck.value)
        proc.wait(timeout=10)  # stopped after the dump, by SIGTERM: it stops its broker too
        for pid in tansu:
            assert_gone(pid, "the child the line reader gave up on")
