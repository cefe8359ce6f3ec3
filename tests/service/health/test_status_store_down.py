"""/api/status tells the truth while the store is down or busy (issue 31, point 3): it answered
HTTP 500, or nothing within 10 s, so the dashboard went blank exactly when an operator looked.
Now it answers at once with the last stored state it read, marked stale, naming what does not
answer; counts and plans stay this process's own and current.

The service runs in this process against the embedded broker; the store is made to hang (a
query that takes 20 s) or to fail, as a PostgreSQL server that stops answering would.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp.test_utils import TestClient, TestServer

from streamanon.service.config import load_config
from streamanon.service.lifecycle import Service
from streamanon.service.status import STATUS_WAIT_SECONDS
from streamanon.service.store import StoreUnavailable
from streamanon.service.web import make_app
from tests.service.conftest import write_config
from tests.service.lifecycle_helpers import ThreadComputePool, put_model

SURVEY = "wellbeing"
HANG_SECONDS = 20.0


def test_the_status_answers_at_once_with_the_last_known_state_when_the_store_hangs_or_fails(
        broker, tmp_path):
    models = tmp_path / "cost_models.json"
    put_model(models, "mdav", 3, 5, [(1000, 0.01), (2000, 0.04)])
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=5, engine="mdav",
                             extra=f'cost_models = "{models}"')
    config = load_config(path, env)

    async def run() -> list[tuple[int, float, dict]]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        answers = []
        try:
            async with TestClient(TestServer(make_app(service))) as client:
                async def get() -> None:
                    started = time.monotonic()
                    resp = await client.get("/api/status")
                    answers.append((resp.status, time.monotonic() - started,
                                    await resp.json()))

                await get()  # the store answers
                real = service.store.survey_state

                def hang(sid):
                    time.sleep(HANG_SECONDS)
                    return real(sid)

                service.store.survey_state = hang
                await get()  # the store hangs
                service.store.survey_state = real

                def fail(sid):
                    raise StoreUnavailable("the server closed the connection")

                await asyncio.sleep(HANG_SECONDS)  # the hung query is through
                service.store.survey_state = fail
                await get()  # the store fails
                service.store.survey_state = real
                await get()  # and is back
        finally:
            await service.stop()
        return answers

    (fresh, hung, failed, back) = asyncio.run(run())
    assert fresh[0] == 200 and fresh[2]["stale"] is False and fresh[2]["unreachable"] == []
    known = fresh[2]["surveys"][0]
    assert known["state"] == "OPEN"
    for code, seconds, body in (hung, failed):
        assert code == 200
        assert seconds < HANG_SECONDS / 4  # it did not wait for the store (it waits 0.8 s)
        assert body["stale"] is True and body["unreachable"] == ["store"]
        survey = body["surveys"][0]
        assert survey["state"] == known["state"] and survey["id"] == SURVEY
        assert body["health"]["store"]["ok"] is False
    assert hung[1] >= STATUS_WAIT_SECONDS * 0.9  # it gave the store its chance
    assert back[0] == 200 and back[2]["stale"] is False
