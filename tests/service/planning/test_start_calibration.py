"""Start fast, calibrate in the background (issue 31, point 4): a service with no stored cost
model starts without waiting for its calibration (which took 4 min 7 s on a loaded machine,
with no HTTP meanwhile), plans with provisional models and says so in its status, and takes
the measured ones when they are ready; nor does it wait for its collector's group join.

The service runs in this process against the embedded broker, its compute pool in a thread,
where a calibration held at a gate stands for a slow one.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from scheduler.cost_model import CostModelStore
from streamanon.service.config import load_config
from streamanon.service.lifecycle import Service
from streamanon.service.planning import provisional_model
from tests.service.conftest import write_config
from tests.service.lifecycle_helpers import ThreadComputePool

SURVEY = "wellbeing"
M, K = 3, 5


def test_start_does_not_wait_for_calibration_and_the_status_says_what_is_measured(
        broker, tmp_path, monkeypatch):
    import streamanon.service.planning as planning

    models = tmp_path / "cost_models.json"  # none stored: MDAV must be calibrated
    gate, entered = threading.Event(), threading.Event()
    real = planning.calibrate

    def slow_calibrate(*args, **kwargs):
        entered.set()
        assert gate.wait(120), "the test never opened the gate"
        return real(*args, **kwargs)

    monkeypatch.setattr(planning, "calibrate", slow_calibrate)
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=K, engine="mdav",
                             extra=f'cost_models = "{models}"')
    config = load_config(path, env)

    async def run() -> tuple[dict, dict]:
        service = Service(config, compute_pool=ThreadComputePool())
        try:
            # the calibration is held: a start that waited for it would not return
            await asyncio.wait_for(service.start(), timeout=60)
            before = (await service.status()).to_json()["surveys"][0]
            assert await asyncio.to_thread(entered.wait, 60)  # it is under way, in the pool
            gate.set()
            await asyncio.wait_for(service.measured(SURVEY), timeout=120)
            after = (await service.status()).to_json()["surveys"][0]
            return before, after
        finally:
            gate.set()
            await service.stop()

    before, after = asyncio.run(run())
    provisional = provisional_model("mdav", M, K)
    assert before["cost_model_measured"] is False
    assert before["cost_model"][1:] == pytest.approx([provisional.a, provisional.b])
    stored = CostModelStore(models).get("mdav", M, K)
    assert stored is not None  # calibrated, and kept for the next start
    assert after["cost_model_measured"] is True
    assert after["cost_model"][1:] == pytest.approx([stored.a, stored.b])


def test_stored_models_are_used_at_once_and_only_the_stages_are_timed_after_start(
        broker, tmp_path, monkeypatch):
    import streamanon.service.planning as planning
    from tests.service.lifecycle_helpers import put_model

    models = tmp_path / "cost_models.json"
    put_model(models, "mdav", M, K, [(1000, 0.01), (2000, 0.04)])
    stored = CostModelStore(models).get("mdav", M, K)
    calibrated = []
    monkeypatch.setattr(planning, "calibrate", lambda *a, **kw: calibrated.append(a))
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=K, engine="mdav",
                             extra=f'cost_models = "{models}"')
    config = load_config(path, env)

    async def run() -> tuple:
        service = Service(config, compute_pool=ThreadComputePool())
        try:
            await service.start()
            first = service.surveys[SURVEY].plans.models[0]
            await service.measured(SURVEY)
            return first, service.surveys[SURVEY].plans.models[0], \
                service.surveys[SURVEY].plans.provisional
        finally:
            await service.stop()

    first, later, provisional = asyncio.run(run())
    assert (first.a, first.b) == pytest.approx((stored.a, stored.b)) == (later.a, later.b)
    assert not provisional and calibrated == []


def test_start_does_not_wait_for_the_group_join(broker, tmp_path):
    """aiokafka's consumer start waits for the group join, which the embedded broker holds
    for half the session timeout: 15 s of a 17.5 s start (measured), HTTP down meanwhile.
    The service's start now returns with the join still under way; the collector's loop
    gets its partitions after it."""
    from tests.service.lifecycle_helpers import put_model

    models = tmp_path / "cost_models.json"
    put_model(models, "mdav", M, K, [(1000, 0.01), (2000, 0.04)])
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=K, engine="mdav",
                             extra=f'cost_models = "{models}"', session_timeout_ms=30_000)
    config = load_config(path, env)

    async def run() -> tuple[int, int]:
        service = Service(config, compute_pool=ThreadComputePool())
        try:
            await service.start()
            consumer = service.collector._consumer
            at_start = len(consumer.assignment())
            for _ in range(600):  # the join: up to 15 s here
                if consumer.assignment():
                    break
                await asyncio.sleep(0.1)
            return at_start, len(consumer.assignment())
        finally:
            await service.stop()

    at_start, later = asyncio.run(run())
    assert at_start == 0  # started before the group gave it anything
    assert later > 0  # and the collector joins all the same


def test_start_does_not_wait_for_the_kernel_warm_up(broker, tmp_path, monkeypatch):
    """The compute process loads (on a fresh clone: compiles) its kernels at start. A start
    that waited for it had no HTTP and no /healthz for 42 s on a loaded machine with a cold
    cache; the warm-up goes on in the background, ahead of any compute in the pool."""
    import streamanon.service.lifecycle as lifecycle

    gate, entered = threading.Event(), threading.Event()

    def slow_warm_up() -> bool:
        entered.set()
        assert gate.wait(120), "the test never opened the gate"
        return True

    monkeypatch.setattr(lifecycle, "warm_up_compute", slow_warm_up)
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=K, engine="mdav")
    config = load_config(path, env)

    async def run() -> None:
        service = Service(config, compute_pool=ThreadComputePool())
        try:
            await asyncio.wait_for(service.start(), timeout=60)  # the warm-up is held
            assert await asyncio.to_thread(entered.wait, 60)  # and under way
            assert not gate.is_set()
        finally:
            gate.set()
            await service.stop()

    asyncio.run(run())
