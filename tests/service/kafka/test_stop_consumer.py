"""Stopping an aiokafka consumer whose fetcher has a fetch request in its retry back-off
(after a broker restart): aiokafka's ``Fetcher.close`` cancels that task and awaits it, so
``consumer.stop()`` raises CancelledError (aio-libs/aiokafka#647) and skips closing its
client. The service's stop must not fail on it (``test_health_broker`` did, once in a full
suite), must still close the client, and must still pass on a cancellation of its own."""

from __future__ import annotations

import asyncio

import pytest

from streamanon.service.health import stop_consumer


class _Client:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class _Consumer:
    """Stops as aiokafka's does when a pending fetch task was cancelled: raises CancelledError
    after marking itself closed, its client left open."""

    def __init__(self, hang: bool = False) -> None:
        self._client = _Client()
        self.hang = hang

    async def stop(self) -> None:
        if self.hang:
            await asyncio.sleep(3600)
        task = asyncio.ensure_future(asyncio.sleep(3600))
        await asyncio.sleep(0)
        task.cancel()
        await task  # raises CancelledError, as Fetcher.close does


def test_a_consumer_whose_stop_raises_its_own_cancellation_is_stopped_and_closed():
    consumer = _Consumer()
    asyncio.run(stop_consumer(consumer))
    assert consumer._client.closed


def test_a_cancellation_of_the_caller_still_cancels_it():
    async def main() -> None:
        consumer = _Consumer(hang=True)
        stopping = asyncio.ensure_future(stop_consumer(consumer))
        await asyncio.sleep(0.01)
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping

    asyncio.run(main())
