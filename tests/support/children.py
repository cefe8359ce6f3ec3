"""Reading a child command's output line by line with a deadline: a child that stays silent
past it is asked for the stack of each of its threads (``kill -USR1``: ``streamanon``
registers :mod:`faulthandler` on it), stopped (SIGTERM, then SIGKILL after 10 s), and the
test fails with everything it printed, instead of waiting on a ``readline`` until
pytest-timeout shows only the test's own stack."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time


class Lines:
    """``Lines(proc).next()`` -> the child's next output line ("" once it has ended)."""

    def __init__(self, proc: subprocess.Popen[str], seconds: float = 120.0) -> None:
        self.proc = proc
        self.seconds = seconds
        self.seen: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="child-output").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, ""):
            self._queue.put(line)
        self._queue.put("")

    def next(self) -> str:
        try:
            line = self._queue.get(timeout=self.seconds)
        except queue.Empty:
            raise AssertionError(self._stuck()) from None
        self.seen.append(line)
        return line

    def rest(self, seconds: float = 10.0) -> str:
        """What the child prints until it ends (at most ``seconds`` more)."""
        deadline = time.monotonic() + seconds
        out = []
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if not line:
                break
            out.append(line)
        return "".join(out)

    def _stuck(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)
            dump = self.rest(3.0)
            self.proc.terminate()  # so that it stops what it started (an embedded broker)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        else:
            dump = self.rest(3.0)
        return (f"the child printed nothing for {self.seconds:.0f} s; its output so far:\n"
                + "".join(self.seen) + "\nits threads when it was asked (kill -USR1):\n" + dump)
