"""A survey driven through its states without a broker: :class:`~streamanon.service.survey.Survey`
owns its state and makes its moves (start the base run, close, release) on a SQLite store,
with a stand-in collector and releaser; a move its stored state does not allow is refused."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from streamanon.service.states import BASE_DONE, BASE_RUNNING, CLOSING, OPEN, RELEASED
from streamanon.service.store import RecordRow, SQLiteStore, record_digest
from streamanon.service.survey import IllegalMove, ServiceParts
from tests.service.lifecycle_helpers import planner_for

M, K = 2, 3


def rows(n: int) -> list[RecordRow]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        qi = rng.standard_normal(M).tobytes()
        out.append(RecordRow(arrived_at=1000.0 + i, partition=0, offset=i,
                             rid_hash=i.to_bytes(32, "big"),
                             digest=record_digest(qi, "{}", None), qi=qi, confidential="{}",
                             label=None))
    return out


class StandInCollector:
    """The close marks are the stored records' count; nothing is left to drain."""

    def __init__(self) -> None:
        self.drained: list[dict[int, int]] = []

    async def take_close(self, sid, closed_at, save):
        return await save({0: 40})

    async def drain(self, sid, marks):
        self.drained.append(marks)


class StandInReleaser:
    """Releases at once: the state moves as the real release moves it."""

    def __init__(self) -> None:
        self.released: list[str] = []

    async def prepare_base(self, survey, frame, labels, prepared):
        return None

    async def release(self, survey, base_model, stages):
        self.released.append(survey.id)
        await survey.move(RELEASED, "released by the stand-in")
        survey.released()


@pytest.fixture
def survey(tmp_path):
    planner = planner_for(tmp_path, {"k": K}, M, close_in=3600)
    sv = planner.surveys["s"]
    store = SQLiteStore(str(tmp_path / "s.db"))
    store.ensure_survey("s")
    store.insert_records("s", rows(40))

    async def in_store(fn, *args):
        return fn(*args)

    pool = ThreadPoolExecutor(1)
    sv.parts = ServiceParts(planner.config, store, in_store, pool, planner,
                            releaser=StandInReleaser(), collector=StandInCollector())
    yield sv
    pool.shutdown()
    store.close()


def test_a_survey_goes_through_its_states_without_a_broker(survey):
    store = survey.parts.store

    async def drive() -> list[str]:
        seen = [(await survey.stored_state()).state]
        assert await survey.start_base(None)
        seen.append(survey.state)
        assert not await survey.start_base(None)  # one base run at a time
        await survey.base_task
        seen.append((await survey.stored_state()).state)
        await survey.request_close()
        await survey.closed(timeout=30)
        seen.append(survey.state)
        return seen

    assert asyncio.run(drive()) == [OPEN, BASE_RUNNING, BASE_DONE, RELEASED]
    assert [to for _, to, _, _ in store.transitions("s")] == [
        BASE_RUNNING, BASE_DONE, CLOSING, RELEASED]
    assert store.load_checkpoint("s").n_base == 40
    assert survey.base_task is None and survey.base_steps["engine"] > 0
    assert {"base_seconds", "closed_at", "drain", "wait_for_base"} <= set(survey.timings)
    assert survey.parts.collector.drained == [{0: 40}]
    assert survey.parts.releaser.released == ["s"]
    assert survey.ingest.closed_at is not None and survey.ingest.closure.final


def test_a_move_the_state_does_not_allow_is_refused(survey):
    store = survey.parts.store

    async def moves() -> None:
        with pytest.raises(IllegalMove, match="OPEN -> BASE_DONE"):
            await survey.move(BASE_DONE, "no base run")
        with pytest.raises(IllegalMove, match="OPEN -> RELEASED"):
            await survey.move(RELEASED, "nothing released")
        await survey.move(CLOSING, "closing")
        with pytest.raises(IllegalMove, match="allowed: \\['RELEASED'\\]"):
            await survey.move(BASE_RUNNING, "too late")
        assert not await survey.start_base(None)  # closing: no base run starts

    asyncio.run(moves())
    assert [to for _, to, _, _ in store.transitions("s")] == [CLOSING]
    assert survey.state == CLOSING


def test_a_survey_closed_before_any_base_run_is_released_one_shot(survey):
    async def close() -> None:
        await survey.request_close()
        await survey.closed(timeout=30)

    asyncio.run(close())
    assert [to for _, to, _, _ in survey.parts.store.transitions("s")] == [CLOSING, RELEASED]
    assert survey.parts.store.load_checkpoint("s") is None
