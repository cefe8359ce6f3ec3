"""The simulated respondents keep the wall clock whatever the service's process does: they
produce from a process of their own (streamanon.simulation.respondents)."""

from __future__ import annotations

import secrets
import sys
import time

import numpy as np

from streamanon.simulation.respondents import start_respondents
from tests.service.kafka_helpers import read_topic

N = 200


def test_respondents_keep_the_clock_while_this_process_holds_the_interpreter(broker):
    """This process holds the interpreter for 4.5 s (a thread switch only every 10 s), as a
    base run's preparation did in the service's process: the responses due in its last
    2 s still go out within 0.5 s of their time (a producer thread here sent them seconds
    late: after the close, in make demo)."""
    topic = f"t{secrets.token_hex(4)}.responses"
    rng = np.random.default_rng(0)
    X, answers = rng.normal(size=(N, 3)), rng.integers(1, 6, N)
    send_at = np.linspace(2.0, 4.0, N)  # the child has long started (spawned: a second)
    opened, wall = time.monotonic(), time.time()
    halt, process = start_respondents(broker.bootstrap, topic, X, answers, send_at, opened,
                                      malformed=False)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    try:
        end = time.monotonic() + 4.5
        while time.monotonic() < end:
            pass
    finally:
        sys.setswitchinterval(interval)
    process.join(60)
    halt.set()
    assert process.exitcode == 0
    records = read_topic(broker.bootstrap, topic, expected=N)
    assert len(records) == N
    due = {f"R{i:07d}".encode(): wall + send_at[i] for i in range(N)}
    late = max(r.timestamp / 1000 - due[r.key] for r in records if due[r.key] >= wall + 2.5)
    assert late < 0.5, late
