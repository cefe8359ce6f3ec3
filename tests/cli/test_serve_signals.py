"""`streamanon serve --embedded-broker` stops on a signal at any moment; one landing while the
event loop is being built once left a half-built loop whose finaliser printed a traceback
(``'_UnixSelectorEventLoop' object has no attribute '_debug'``) at exit."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from streamanon.cli import serve as serve_cli


def test_a_signal_while_the_loop_is_built_stops_the_run_once_the_loop_is_whole(monkeypatch):
    before = signal.signal(signal.SIGHUP, serve_cli._interrupt)
    runner = asyncio.Runner()
    build = runner.get_loop

    def signalled_then_built():
        os.kill(os.getpid(), signal.SIGHUP)  # lands inside the loop's construction
        return build()

    monkeypatch.setattr(runner, "get_loop", signalled_then_built)
    try:
        with pytest.raises(KeyboardInterrupt):
            serve_cli._build_loop(runner)
        loop = build()
        assert loop.get_debug() in (True, False)  # whole: its attributes are all set
    finally:
        runner.close()
        signal.signal(signal.SIGHUP, before)
