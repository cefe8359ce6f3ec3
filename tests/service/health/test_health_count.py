"""An outage is counted once: a part restarted in place while a health check waits on the
store is not counted again by that check (its view of the part would be from before)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from types import SimpleNamespace

from streamanon.service.lifecycle import Service
from streamanon.service.telemetry import Telemetry
from tests.service.lifecycle_helpers import ThreadComputePool


def test_a_restart_while_the_check_waits_on_the_store_is_one_failure():
    async def run() -> dict[str, int]:
        broken = ProcessPoolExecutor(1)
        broken._broken = "the ingest worker exited"  # what the pool's manager thread sets
        worker = SimpleNamespace(pool=broken)
        loop_task = asyncio.create_task(asyncio.sleep(60))
        service = Service.__new__(Service)
        service.telemetry = Telemetry()
        service.collector = SimpleNamespace(_task=loop_task, worker=worker, dead_letters=None,
                                            store_paused=False)
        service.producer = None
        service.release_producer = None
        service._pool = ThreadComputePool()
        service.surveys = {"s": None}
        service.store = SimpleNamespace(survey_state=lambda sid: None)

        async def in_store(fn, *args):  # the collector restarts its worker meanwhile (once)
            if worker.pool is broken:
                worker.pool = ThreadPoolExecutor(1)
                service.telemetry.count_restart("collector")
            return fn(*args)

        service._in_store = in_store
        await service.health()
        await service.health()
        loop_task.cancel()
        return dict(service.telemetry.part_failures)

    failures = asyncio.run(run())
    assert failures.get("collector") == 1
