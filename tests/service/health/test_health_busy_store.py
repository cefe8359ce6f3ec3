"""/healthz tells busy from down (issue 31, point 3): at the close of a 1,000,000-record survey
on the SQLite store the log said "store is down: no answer within 3 s (/healthz answers 503)"
and the release went out normally seconds later; an orchestrator would have restarted a
healthy service mid-release. A store whose one thread is running a long operation is busy
(200, and says so); a store whose health query itself hangs, or that fails, is down (503).

The service runs in this process against the embedded broker.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp.test_utils import TestClient, TestServer

from streamanon.service.config import load_config
from streamanon.service.health import STORE_TIMEOUT_SECONDS, PartHealth, busy_store
from streamanon.service.lifecycle import Service
from streamanon.service.web import make_app
from tests.service.conftest import write_config
from tests.service.lifecycle_helpers import ThreadComputePool, put_model

SURVEY = "wellbeing"
LONG = STORE_TIMEOUT_SECONDS + 4.0  # a store operation longer than the health query waits


def test_a_long_store_operation_is_busy_and_a_hanging_query_is_down(broker, tmp_path):
    models = tmp_path / "cost_models.json"
    put_model(models, "mdav", 3, 5, [(1000, 0.01), (2000, 0.04)])
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=5, engine="mdav",
                             extra=f'cost_models = "{models}"')
    config = load_config(path, env)

    async def run() -> tuple:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        try:
            async with TestClient(TestServer(make_app(service))) as client:
                # a long operation in the store thread (as loading a large survey is)
                job = asyncio.ensure_future(service._in_store(time.sleep, LONG))
                await asyncio.sleep(0.2)
                resp = await client.get("/healthz")
                busy = resp.status, await resp.text()
                await job
                real = service.store.survey_state

                def hang(sid):  # the health query itself does not come back
                    time.sleep(LONG)
                    return real(sid)

                service.store.survey_state = hang
                resp = await client.get("/healthz")
                down = resp.status, await resp.text()
                service.store.survey_state = real
                await asyncio.sleep(LONG - STORE_TIMEOUT_SECONDS)  # the hung query is through
                resp = await client.get("/healthz")
                back = resp.status, await resp.text()
        finally:
            await service.stop()
        return busy, down, back

    busy, down, back = asyncio.run(run())
    assert busy == (200, "ok\n")
    assert down[0] == 503 and "store: no answer within" in down[1]
    assert back == (200, "ok\n")


def test_busy_is_bounded_and_a_failure_since_is_down():
    timed_out = PartHealth(False, "no answer within 3 s")
    # running since before the query, not for long, no failure: busy
    assert busy_store(timed_out, asked=10.0, running_since=8.0, failed_at=None, now=12.0).ok
    assert "busy" in busy_store(timed_out, 10.0, 8.0, None, now=12.0).detail
    # the operation that does not answer is the health query itself: down
    assert not busy_store(timed_out, asked=10.0, running_since=10.5, failed_at=None,
                          now=13.0).ok
    # running for longer than the limit: down (a connection that hangs for ever)
    assert not busy_store(timed_out, 10.0, 8.0, None, now=400.0, limit=300.0).ok
    # a store operation failed since it started: down
    assert not busy_store(timed_out, 10.0, 8.0, failed_at=9.0, now=12.0).ok
    # a failure is not turned into busy, nor is a healthy store touched
    failed = PartHealth(False, "a query failed (OperationalError)")
    assert busy_store(failed, 10.0, 8.0, None, now=12.0) is failed
    assert busy_store(PartHealth(True, "answering"), 10.0, 8.0, None, now=12.0).ok
