"""The health monitor stops when told, whenever that is: a SIGTERM that came just as a health
check finished left ``streamanon serve`` running forever (issue 13), because on Python < 3.12
``asyncio.wait_for`` swallows a cancellation that lands as the awaited check completes."""

from __future__ import annotations

import asyncio

from streamanon.service.health import HealthMonitor, PartHealth


def test_the_monitor_stops_when_cancelled_as_its_check_finishes():
    async def scenario() -> None:
        finished = asyncio.get_running_loop().create_future()

        async def check() -> dict[str, PartHealth]:
            await finished
            return {"store": PartHealth(True, "answering")}

        monitor = HealthMonitor(check, env={})
        monitor.start()
        await asyncio.sleep(0.01)  # the monitor waits for its first check
        finished.set_result(None)
        await asyncio.sleep(0)  # the check is done; the monitor has not seen it yet
        stopping = asyncio.ensure_future(monitor.stop())
        done, _ = await asyncio.wait({stopping}, timeout=2)
        while not done and not monitor._task.done():  # let asyncio.run end after a failure
            monitor._task.cancel()
            await asyncio.sleep(0.01)
        assert done, "the monitor ran on after stop()"

    asyncio.run(scenario())
