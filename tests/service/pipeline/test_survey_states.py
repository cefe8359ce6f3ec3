"""A survey driven through its states without a broker: :class:`~streamanon.service.survey.Survey`
owns its state and makes its moves (start the base run, close, release) on a SQLite store,
with a stand-in collector and releaser; a move its stored state does not allow is refused."""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from streamanon.service.states import BASE_DONE, BASE_RUNNING, CLOSING, OPEN, RELEASED
from streamanon.service.store import SQLiteStore
from streamanon.service.survey import IllegalMove, ServiceParts
from tests.service.lifecycle_helpers import planner_for, stored_rows

M, K = 2, 3



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


@contextlib.contextmanager
def attached_survey(tmp_path, **settings):
    """Survey ``s`` (k = K, ``settings``) with 40 stored records, attached to stand-in parts:
    a SQLite store, a thread as the compute pool, the stand-in collector and releaser."""
    planner, sv = planner_for(tmp_path, {"k": K, **settings}, M, close_in=3600)
    store = SQLiteStore(str(tmp_path / "s.db"))
    store.ensure_survey("s")
    store.insert_records("s", stored_rows(40, M, seed=7))

    async def in_store(fn, *args):
        return fn(*args)

    pool = ThreadPoolExecutor(1)
    sv.parts = ServiceParts(planner.config, store, in_store, pool, planner,
                            releaser=StandInReleaser(), collector=StandInCollector())
    try:
        yield sv
    finally:
        pool.shutdown()
        store.close()


@pytest.fixture
def survey(tmp_path):
    with attached_survey(tmp_path) as sv:
        yield sv


def test_the_base_run_keeps_the_engine_it_started_with(tmp_path, monkeypatch):
    """``engine = "auto"``: a close during the base run finds no checkpoint and settles the
    choice anew; the base run goes on with the engine it started with, and its checkpoint and
    its timing sample name that engine, not the new one (a timing filed under another
    engine's cost model skews every later plan)."""
    import streamanon.service.base_run as base_run_module

    with attached_survey(tmp_path, engine="auto") as survey:
        observed: list[str] = []
        monkeypatch.setattr(survey.parts.planner.cost_models, "observe",
                            lambda engine, *args, **kwargs: observed.append(engine))
        engine_run = base_run_module.kept_base_partition

        def chosen_anew_meanwhile(*args):
            survey.settle_engine("mdav" if survey.engine != "mdav" else "ona_star",
                                 "a close during the base run chose anew")
            return engine_run(*args)

        monkeypatch.setattr(base_run_module, "kept_base_partition", chosen_anew_meanwhile)

        async def drive() -> str:
            assert await survey.start_base(None)
            started = survey.engine
            await survey.base_task
            return started

        started = asyncio.run(drive())
        assert started != "auto" and survey.engine != started  # chosen anew meanwhile
        assert survey.parts.store.load_checkpoint("s").engine == started
        assert observed == [started]


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


class Follower:
    """The lease of an instance that does not lead: requests go to the leader, and a clean
    cut is the coordination's."""

    leading = False

    def __init__(self) -> None:
        self.stored: dict[str, int] = {}  # every instance's count: none yet
        self.requests: list[tuple[str, str]] = []
        self.coordination = SimpleNamespace(
            request=lambda sid, what: self.requests.append((sid, what)),
            snapshot_seq=lambda sid: 7)


def test_a_follower_hands_its_moves_to_the_leader(tmp_path):
    """On a follower (the service's lease, as ``Service._claim`` sets it), a base run is
    requested of the leader, a close is stored and left to the leader, and a snapshot's cut is
    the coordination's clean cut: the survey sees the service's lease."""
    from streamanon.service.lifecycle import Service

    planner, sv = planner_for(tmp_path, {"k": K}, M, close_in=3600)
    store = SQLiteStore(str(tmp_path / "s.db"))
    store.ensure_survey("s")
    store.insert_records("s", stored_rows(40, M, seed=7))
    pool = ThreadPoolExecutor(1)
    service = Service(planner.config, store=store, compute_pool=pool)
    sv.parts = service.parts
    service.surveys["s"] = sv
    follower = Follower()
    service.coordinator = follower  # as _claim does on a shared store

    async def moves() -> tuple[bool, int]:
        service.loop = asyncio.get_running_loop()
        started = await service.start_base("s", None)
        await service.close("s")
        return started, await sv.clean_cut()

    try:
        started, cut = asyncio.run(moves())
    finally:
        service._store_thread.shutdown()
        pool.shutdown()
    assert not started and follower.requests == [("s", "start_base")]
    assert sv.close_task is None and sv.base_task is None  # the leader closes
    assert store.survey_state("s").close_requested_at is not None  # stored for the leader
    assert store.survey_state("s").state == OPEN
    assert cut == 7
    store.close()


def test_a_cancelled_base_run_leaves_its_steps_so_far(survey, monkeypatch):
    """A base run cancelled in its engine (the lease lost, the service stopping) leaves the
    steps it made (load, prepare) for the report, and no running task."""
    import threading

    import streamanon.service.base_run as base_run

    release = threading.Event()
    entered = threading.Event()

    def engine(*args):
        entered.set()
        release.wait(30)
        raise RuntimeError("never used")

    monkeypatch.setattr(base_run, "kept_base_partition", engine)

    async def cancel() -> None:
        assert await survey.start_base(None)
        while not entered.is_set():
            await asyncio.sleep(0.01)
        survey.base_task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await survey.base_task

    try:
        asyncio.run(cancel())
    finally:
        release.set()
    assert {"load", "prepare"} <= set(survey.base_steps)
    assert "engine" not in survey.base_steps and survey.base_task is None
