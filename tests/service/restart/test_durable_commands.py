"""A command is durable before it is acknowledged: a close asked for while the store is down is
answered 503 "retry later" over HTTP, and a control message is not committed until the service
has applied it (it is re-read after a restart); no background task's failure goes unlogged."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiokafka.structs import TopicPartition

from streamanon.service.collector import KafkaCollector
from streamanon.service.control import sign
from streamanon.service.ingest import SurveyIngest
from streamanon.service.store import StoreUnavailable
from streamanon.service.validation import Validator
from streamanon.service.web import make_app
from tests.service.collector.test_collector_faults import FakeConsumer, Record, make_config
from tests.service.kafka_helpers import ENV, MemoryDeadLetters

TOKEN = ENV["STREAMANON_HTTP_TOKEN"]


# -- the control topic: committed only once applied --------------------------------------------

def control_consumer(config: Any) -> tuple[FakeConsumer, TopicPartition]:
    control = TopicPartition(config.control_topic, 0)
    responses = TopicPartition(config.topic("s", "responses"), 0)
    consumer = FakeConsumer({control: [], responses: []})
    consumer.logs[control].append(Record(control.topic, 0, 0, None, sign("close", "s", TOKEN)))
    return consumer, control


async def wait_for(condition: Any, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)


def test_a_control_message_is_committed_only_once_it_is_applied(tmp_path: Path):
    config = make_config(tmp_path)
    consumer, control = control_consumer(config)

    async def run() -> None:
        applied = asyncio.get_running_loop().create_future()
        handed: list[bytes | None] = []

        def on_control(raw: bytes | None) -> asyncio.Future:
            handed.append(raw)
            return applied  # the service is still applying it (the store is down)

        sc = config.surveys[0]
        ingest = SurveyIngest(sc, Validator(sc, config.hmac_key))
        collector = KafkaCollector(config, {sc.id: ingest}, MemoryDeadLetters(),
                                   on_stored=lambda sid, times: None,
                                   consumer_factory=consumer, on_control=on_control)
        await collector.start()
        try:
            await wait_for(lambda: handed)
            await asyncio.sleep(0.5)  # many fetch rounds
            assert all(control not in commit for commit in consumer.commits)
            applied.set_result(None)
            await wait_for(lambda: any(c.get(control) == 1 for c in consumer.commits))
        finally:
            await collector.stop()
        assert len(handed) == 1  # handed over once, then awaited

    asyncio.run(run())


# -- the service: a close waits for the store, and says so --------------------------------------

class DownStore:
    """Stands in for the store's calls: unavailable ``failures`` times, then records."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.requested: list[str] = []

    def request_close(self, sid: str) -> None:
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("the store cannot be reached")
        self.requested.append(sid)


def test_the_service_retries_a_control_close_until_the_store_has_it(caplog, monkeypatch):
    from streamanon.service import lifecycle

    monkeypatch.setattr(lifecycle, "COMMAND_RETRY_SECONDS", (0.01, 0.02))
    store = DownStore(failures=3)

    async def run() -> None:
        service = lifecycle.Service.__new__(lifecycle.Service)
        service._tasks = set()
        service.surveys = {"s": None}

        async def close(sid: str) -> None:
            store.request_close(sid)

        service.close = close  # type: ignore[method-assign]
        task = service._apply_command("close", "s")
        await asyncio.wait_for(task, 10)

    with caplog.at_level(logging.INFO, logger="streamanon.service"):
        asyncio.run(run())
    assert store.requested == ["s"]
    waits = [r for r in caplog.records if "waits for the store" in r.getMessage()]
    assert len(waits) == 1 and "survey s" in waits[0].getMessage()  # once per outage
    assert any("recorded" in r.getMessage() for r in caplog.records)


def test_a_failed_background_task_is_logged_with_what_it_was(caplog):
    from streamanon.service import lifecycle

    async def run() -> None:
        service = lifecycle.Service.__new__(lifecycle.Service)
        service._tasks = set()

        async def boom() -> None:
            raise ValueError("no value here")

        task = service._background(boom(), "survey s: base run")
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)

    with caplog.at_level(logging.ERROR, logger="streamanon.service"):
        asyncio.run(run())
    assert any("survey s: base run failed" in r.getMessage() for r in caplog.records)


# -- HTTP: 503 with Retry-After while the store is down ------------------------------------------

class HttpService:
    coordinator = None

    def __init__(self) -> None:
        self.surveys = {"s": None}
        self.calls = 0

    def check_token(self, token: str) -> bool:
        return token == TOKEN

    async def close(self, sid: str) -> None:
        self.calls += 1
        raise StoreUnavailable("the store cannot be reached")


@pytest.mark.parametrize("path", ["close", "base"])
def test_a_command_while_the_store_is_down_is_503_retry_later(path):
    service = HttpService()

    async def start_base(sid: str, plan: Any) -> bool:
        raise StoreUnavailable("the store cannot be reached")

    service.start_base = start_base  # type: ignore[attr-defined]

    async def run() -> tuple[int, dict[str, str], str]:
        async with TestClient(TestServer(make_app(service))) as client:
            response = await client.post(f"/api/surveys/s/{path}",
                                         headers={"Authorization": f"Bearer {TOKEN}"})
            return response.status, dict(response.headers), await response.text()

    status, headers, text = asyncio.run(run())
    assert status == 503 and int(headers["Retry-After"]) > 0
    assert "not recorded" in text and "retry" in text
