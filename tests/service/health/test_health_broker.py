"""/healthz reflects the broker (issue 31, point 3): with the broker dead it said 200 (the
clients reconnect by themselves, so no part of the service looked down) while the log filled
with client errors. The broker is now a part of its own: a metadata request answered within
2 s, or 503 "unhealthy: broker" on /healthz (readiness); /livez (liveness, the systemd
watchdog) leaves it out, since a restart does not bring a broker back.

The service runs in this process against a broker of its own, which the test stops and starts
again on the same port.
"""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer

from streamanon.service.broker import EmbeddedBroker, free_port
from streamanon.service.config import load_config
from streamanon.service.lifecycle import Service
from streamanon.service.web import make_app
from tests.service.conftest import write_config
from tests.service.lifecycle_helpers import ThreadComputePool, put_model

SURVEY = "wellbeing"


def test_healthz_names_a_dead_broker_and_is_ok_once_it_is_back(tmp_path, subprocesses):
    port = free_port()
    broker = EmbeddedBroker(port=port)
    broker.start()
    models = tmp_path / "cost_models.json"
    put_model(models, "mdav", 3, 5, [(1000, 0.01), (2000, 0.04)])
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=5, engine="mdav",
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
                await asyncio.to_thread(broker.stop)
                await healthz()
                resp = await client.get("/livez")  # a restart would not bring it back
                live.append((resp.status, await resp.text()))
                await asyncio.to_thread(broker.start)  # the same address
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
        broker.stop()
    assert answers[0] == (200, "ok\n")
    code, body = answers[1]
    assert code == 503 and body.startswith("unhealthy: broker\n"), body
    assert "broker: no answer within 2 s" in body
    assert answers[-1] == (200, "ok\n")
    assert live == [(200, "ok\n")]  # liveness leaves the broker out: no restart loop
