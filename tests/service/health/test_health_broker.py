"""/healthz reflects the broker (issue 31, point 3): with the broker dead it said 200 (the
clients reconnect by themselves, so no part of the service looked down) while the log filled
with client errors. The broker is now a part of its own: a metadata request answered within
2 s, or 503 "unhealthy: broker" on /healthz (readiness); /livez (liveness, the systemd
watchdog) leaves it out, since a restart does not bring a broker back.

The service runs in this process against a broker of its own, which the test stops and starts
again on the same port: Apache Kafka (one KRaft node, stopped with SIGTERM) and the embedded
broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiohttp.test_utils import TestClient, TestServer

from simulations.apache_kafka import ApacheKafka
from streamanon.service.broker import EmbeddedBroker, free_port
from streamanon.service.config import load_config
from streamanon.service.lifecycle import Service
from streamanon.service.web import make_app
from tests.service.conftest import write_config
from tests.service.lifecycle_helpers import ThreadComputePool, put_model

SURVEY = "wellbeing"


def own_broker(kind: str) -> tuple[str, Callable[[], None], Callable[[], None],
                                   Callable[[], None]]:
    """A started broker of ``kind``: its bootstrap, how to stop it and start it again on the
    same address, and how to end it."""
    if kind == "apache-kafka":
        kafka = ApacheKafka()
        kafka.start()
        return (kafka.bootstrap, lambda: kafka.stop_node(1), lambda: kafka.start_node(1),
                kafka.stop)
    broker = EmbeddedBroker(port=free_port())
    broker.start()
    return broker.bootstrap, broker.stop, broker.start, broker.stop


@pytest.mark.parametrize("kind", ["apache-kafka", "tansu"])
def test_healthz_names_a_dead_broker_and_is_ok_once_it_is_back(tmp_path, subprocesses,
                                                               kafka_cluster, kind):
    bootstrap, stop, start, end = own_broker(kind)
    models = tmp_path / "cost_models.json"
    put_model(models, "mdav", 3, 5, [(1000, 0.01), (2000, 0.04)])
    path, env = write_config(tmp_path, bootstrap, survey=SURVEY, k=5, engine="mdav",
                             extra=f'cost_models = "{models}"')
    config = load_config(path, env)

    async def run() -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        answers = []
        live: list[tuple[int, str]] = []
        try:
            async with TestClient(TestServer(make_app(service))) as client:
                async def healthz() -> None:
                    resp = await client.get("/healthz")
                    answers.append((resp.status, await resp.text()))

                await healthz()
                await asyncio.to_thread(stop)
                await healthz()
                resp = await client.get("/livez")  # a restart would not bring it back
                live.append((resp.status, await resp.text()))
                await asyncio.to_thread(start)  # the same address
                for _ in range(60):  # the clients reconnect within seconds
                    await healthz()
                    if answers[-1][0] == 200:
                        break
                    await asyncio.sleep(0.5)
        finally:
            await service.stop()
        return answers, live

    try:
        answers, live = asyncio.run(run())
    finally:
        end()
    assert answers[0] == (200, "ok\n")
    code, body = answers[1]
    assert code == 503 and body.startswith("unhealthy: broker\n"), body
    assert "broker: no answer within 2 s" in body
    assert answers[-1] == (200, "ok\n")
    assert live == [(200, "ok\n")]  # liveness leaves the broker out: no restart loop
