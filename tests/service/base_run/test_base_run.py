"""The base run reads and prepares its snapshot in threads, never on the event loop (at a
million records that is seconds in which ingest and HTTP would stop), reuses its prepared
input for the base release, and times each of its steps for the release report."""

from __future__ import annotations

import asyncio
import threading

import streamanon.service.base_run as base_run_module
import streamanon.service.releasing as releasing_module
from scheduler.cost_model import RELEASES_KEY
from streamanon.service.config import load_config
from streamanon.service.lifecycle import Service
from tests.service.conftest import write_config
from tests.service.lifecycle_helpers import ThreadComputePool, collect, run_base, until

SURVEY = "wellbeing"


def test_the_base_run_prepares_its_snapshot_off_the_event_loop(broker, tmp_path, monkeypatch):
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=5)
    config = load_config(path, env)
    where: dict[str, list[int]] = {"records_frame": [], "prepare_stored": []}

    def watched(name, fn):
        def call(*args, **kwargs):
            where[name].append(threading.get_ident())
            return fn(*args, **kwargs)
        return call

    for name in where:
        monkeypatch.setattr(base_run_module, name, watched(name, getattr(base_run_module, name)))
    # the base release must not prepare the snapshot again, in whichever module it would
    monkeypatch.setattr(releasing_module, "prepare_stored",
                        watched("prepare_stored", releasing_module.prepare_stored))

    async def run() -> tuple[int, dict[str, float]]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        try:
            plan = await collect(service, broker.bootstrap, config, SURVEY, 60)
            await run_base(service, SURVEY, plan)
            survey = service.surveys[SURVEY]
            await until(lambda: asyncio.sleep(0, survey.base_task is None),
                        "the base release was not prepared")
            assert survey.base_release is not None and survey.base_release[1].n_base == 60
            return threading.get_ident(), dict(survey.base_steps)
        finally:
            await service.stop()

    loop_thread, steps = asyncio.run(run())
    assert where["records_frame"] and where["prepare_stored"]
    assert loop_thread not in where["records_frame"] + where["prepare_stored"]
    assert len(where["prepare_stored"]) == 1  # the base release reuses the run's input
    assert list(steps) == ["load", "prepare", "engine", "checkpoint", "prepare_release"]


def read_ahead_then(broker, tmp_path, n: int, then) -> None:
    """A service with ``n`` records stored and read ahead as the planner would before the
    snapshot; then ``then(service, survey, plan)``."""
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=5)
    config = load_config(path, env)

    async def run() -> None:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        try:
            plan = await collect(service, broker.bootstrap, config, SURVEY, n)
            survey = service.surveys[SURVEY]
            await service.surveys[SURVEY].read_ahead_soon()
            assert sum(len(part) for part in survey.read_ahead.parts) == n
            await then(service, survey, plan)
        finally:
            await service.stop()

    asyncio.run(run())


def watch_reads(service) -> list[tuple[int, int | None]]:
    """The ``(after_seq, upto_seq)`` of each read of the service's stored records from now."""
    reads: list[tuple[int, int | None]] = []
    load = service.store.load_records

    def watched(survey, m, *, after_seq=0, upto_seq=None):
        reads.append((after_seq, upto_seq))
        return load(survey, m, after_seq=after_seq, upto_seq=upto_seq)

    service.store.load_records = watched
    return reads


def test_the_service_reads_the_snapshot_ahead_and_the_base_run_takes_it(broker, tmp_path):
    async def then(service, survey, plan) -> None:
        cut = survey.read_ahead.cut
        reads = watch_reads(service)
        await run_base(service, SURVEY, plan)
        await until(lambda: asyncio.sleep(0, survey.base_task is None), "the base run did not end")
        assert survey.read_ahead.parts == []  # taken, not kept beside the base run's records
        assert reads[0] == (cut, cut)  # only what came after the cut (here: nothing)
        assert survey.base_release is not None and survey.base_release[1].n_base == 60
        await service.surveys[SURVEY].read_ahead_soon()  # after the base run started: nothing read
        assert survey.read_ahead.parts == []

    read_ahead_then(broker, tmp_path, 60, then)


def test_a_release_made_whole_at_close_takes_what_was_read_ahead(broker, tmp_path):
    """No base run (one-shot at close): the records read ahead of the close are the
    release's, which reads only those stored after the cut."""
    async def then(service, survey, plan) -> None:
        cut = survey.read_ahead.cut
        reads = watch_reads(service)
        await service.close(SURVEY)
        await service.closed(SURVEY, timeout=120)
        assert cut > 0 and (cut, None) in reads and (0, None) not in reads
        assert survey.read_ahead.parts == []  # taken, not kept
        release = await service._in_store(service.store.load_release, SURVEY)
        assert release is not None and release.report["n"] == 40
        assert release.report["read_ahead"] == 40 and release.report["mode"] == "one-shot"
        # its load step read none of the 40: not kept as the time to load them
        recorded = service._releaser.cost_models._load()[RELEASES_KEY]["runs"][-1]
        assert recorded[:2] == [40, 40] and "load" not in recorded[2]
        assert "publish" in recorded[2]

    read_ahead_then(broker, tmp_path, 40, then)
