"""The simulated survey platform's respondents: a producer in a process of its own.

The demo and ``simulate`` send response ``i`` at ``send_at[i]`` seconds after the survey opens,
by the wall clock. In the service's own process the producer shared the interpreter with the
service, and a base run's preparation there (pandas and NumPy work that holds the interpreter)
could stall it for seconds under load: in ``make test`` (four workers on two cores) the last
813 of 40,751 responses of ``make demo`` went out after the close and were refused as late.
A survey platform is not stalled by the service it feeds; in a spawned process of its own,
the producer keeps the clock (it reads ``time.monotonic``, one clock for every process of the
machine, from the moment the parent opened the survey).

Only this module, NumPy, the Kafka clients' door and confluent-kafka are imported by the
child.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from typing import Any

import numpy as np

#: The simulated platform's batching (:func:`produce`'s docstring).
PRODUCER_LINGER_MS = 100


def start_respondents(bootstrap: str, topic: str, X: np.ndarray, answers: np.ndarray,
                      send_at: np.ndarray, opened: float, malformed: bool = True
                      ) -> tuple[Any, Any]:
    """Start :func:`produce` in a spawned process; returns its stop event and the process
    (joined by the caller). ``opened``: ``time.monotonic()`` when the survey opened."""
    context = multiprocessing.get_context("spawn")
    halt = context.Event()
    process = context.Process(target=produce, name="respondents", daemon=True, args=(
        bootstrap, topic, np.ascontiguousarray(X), np.asarray(answers), send_at, halt,
        opened, malformed))
    process.start()
    return halt, process


def produce(bootstrap: str, topic: str, X: np.ndarray, answers: np.ndarray,
            send_at: np.ndarray, stop: Any, opened: float | None = None,
            malformed: bool = True) -> None:
    """Send response ``i`` (the quasi-identifiers ``X[i]`` and the answer ``answers[i]``) at
    ``send_at[i]`` seconds after ``opened`` (``time.monotonic()``; default: now), until
    ``stop`` is set; with ``malformed``, four broken messages too (they go to the dead-letter
    topic). By librdkafka, which keeps up with a rush of tens of thousands of responses a
    second.

    Sends are batched for 100 ms (``linger.ms``, Kafka Streams' default), well inside the
    margin the simulation keeps before the close. The embedded broker's work per request grows
    with the batches it holds: with 10 ms batches it took up to 0.7 of two cores by the end of
    a 300 s window at 3,333 responses a second (a million), and the base run with it 1.2-1.5
    times longer; with 100 ms its share stays a few hundredths of a core."""
    from streamanon.service.kafka_clients import KafkaSettings, rdkafka_producer

    producer = rdkafka_producer(KafkaSettings(bootstrap), {
        "linger.ms": PRODUCER_LINGER_MS, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000})
    n, m = X.shape
    started = time.monotonic() if opened is None else opened
    bad = {n // 5: b"{broken", n // 3: b'["not", "an", "object"]',
           n // 2: json.dumps({"respondent_id": "x", "q0": "high"}).encode(),
           2 * n // 3: json.dumps({"respondent_id": "R0000001", **{f"q{j}": 0.0
                                   for j in range(m)}, "answer": 1}).encode()} \
        if malformed else {}
    sent = 0
    while sent < n and not stop.is_set():
        due = int(np.searchsorted(send_at, time.monotonic() - started, side="right"))
        for i in range(sent, due):
            body = {"respondent_id": f"R{i:07d}",
                    **{f"q{j}": float(X[i, j]) for j in range(m)},
                    "answer": int(answers[i])}
            producer.produce(topic, key=f"R{i:07d}".encode(), value=json.dumps(body).encode())
            if i in bad:
                producer.produce(topic, value=bad[i])
        producer.poll(0)
        sent = max(sent, due)
        time.sleep(0.02)
    if producer.flush(120):
        raise RuntimeError(f"responses did not reach {topic}")
