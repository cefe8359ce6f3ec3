"""The k-anonymity gate on the service's release path (design spec §3 and §6, step 6): a partition
with a cell under k, from the engine of a one-shot close or from the incremental stage of a
two-stage close, is stopped before any file is written or any message is published, and the survey
reports the error instead of RELEASED.

The service runs in this process against the embedded broker, with its compute pool in a
thread so that the engine entry point the release path calls (``run_engine`` or ``run_stage``,
as :mod:`streamanon.incremental.run` calls them) can be replaced by one that splits a record off
into a cell of its own. That replacement also skips the engines' own partition check, so the
release gate is the only thing left between the bad partition and the output.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import streamanon.incremental.run
from streamanon.service.config import load_config
from streamanon.service.lifecycle import Service
from streamanon.service.reports import SurveyStatus
from tests.service.conftest import write_config
from tests.service.kafka_helpers import end_offsets, produce, read_topic, response
from tests.service.lifecycle_helpers import ThreadComputePool

K = 5
SURVEY = "wellbeing"


def splitting_off_one_record(run: Callable[..., np.ndarray],
                             calls: list[int]) -> Callable[..., np.ndarray]:
    """``run`` with its partition broken: the last record moves to a new cell of one."""

    def broken(*args: Any, **kwargs: Any) -> np.ndarray:
        labels = np.array(run(*args, **kwargs), copy=True)
        labels[-1] = labels.max() + 1
        calls.append(len(labels))
        return labels

    return broken


async def survey_status(service: Service, until: Callable[[SurveyStatus], bool],
                        timeout: float = 60) -> SurveyStatus:
    deadline = time.monotonic() + timeout
    while True:
        status = next(s for s in (await service.status()).surveys if s.id == SURVEY)
        if until(status):
            return status
        if time.monotonic() > deadline:
            raise TimeoutError(f"last status: {status}")
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("mode", ["one-shot", "two-stage"])
def test_a_cell_under_k_is_never_released(mode, broker, tmp_path, monkeypatch, caplog):
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=K,
                             extra=f'cost_models = "{tmp_path / "cost_models.json"}"')
    config = load_config(path, env)
    responses = config.topic(SURVEY, "responses")
    n_base, n_increment = 200, 40
    calls: list[int] = []

    async def close_with_a_broken_partition() -> SurveyStatus:
        pool = ThreadComputePool()
        service = Service(config, compute_pool=pool)
        await service.start()
        try:
            await asyncio.to_thread(produce, broker.bootstrap, responses,
                                    [(None, response(i)) for i in range(n_base)])
            await survey_status(service, lambda s: s.stored == n_base)
            # the pool's one thread has run what the start queued (the kernels' warm-up runs
            # an engine on 60 records): a slow machine ran it after the spy was in place
            await asyncio.wrap_future(pool.submit(lambda: None))
            if mode == "two-stage":  # an honest base run, then a broken incremental stage
                assert await service.start_base(SURVEY, None)
                await survey_status(service, lambda s: s.state == "BASE_DONE")
                await asyncio.to_thread(
                    produce, broker.bootstrap, responses,
                    [(None, response(n_base + i)) for i in range(n_increment)])
                await survey_status(service, lambda s: s.stored == n_base + n_increment)
                monkeypatch.setattr(streamanon.incremental.run, "run_stage",
                                    splitting_off_one_record(streamanon.incremental.run.run_stage,
                                                             calls))
            else:
                monkeypatch.setattr(streamanon.incremental.run, "run_engine",
                                    splitting_off_one_record(streamanon.incremental.run.run_engine,
                                                             calls))
            await service.close(SURVEY)
            return await survey_status(
                service, lambda s: s.state == "RELEASED" or s.error is not None)
        finally:
            await service.stop()

    status = asyncio.run(close_with_a_broken_partition())
    n = n_base + (n_increment if mode == "two-stage" else 0)
    assert calls == [n]  # the broken partition of all n records reached the release path

    # the survey reports why instead of being released
    assert status.state == "CLOSING"
    # on the public status without the values the gate found (the log has them)
    assert status.error.startswith("close failed: the release did not pass its privacy gate")
    assert f"release is not {K}-anonymous: " in caplog.text  # the data holder's log
    assert status.releases == 0 and status.release is None
    assert "R0" not in status.error  # counts, never a response value

    # nothing written: no release.parquet, release.csv, report.json, nor a temporary file
    for folder in (tmp_path / "releases", tmp_path / "reports"):
        assert not folder.exists() or sorted(folder.rglob("*")) == []

    # nothing published: no record and no manifest ever reached the release topic
    release_topic = config.topic(SURVEY, "release")
    assert end_offsets(broker.bootstrap, release_topic) == {0: 0}
    assert read_topic(broker.bootstrap, release_topic, expected=1, timeout=3) == []
