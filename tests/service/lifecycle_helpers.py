"""Driving an in-process :class:`~streamanon.service.lifecycle.Service` through a survey:
collect responses, start the base run as the planner's trigger does, close and release; and
cost models written beforehand, so the planner needs no calibration; and the compute pool in a
thread that an in-process service runs its engines in (:class:`ThreadComputePool`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from scheduler.cost_model import Calibration, CostModelStore, PowerLaw
from streamanon.service.lifecycle import Service
from streamanon.service.states import BASE_DONE
from tests.service.kafka_helpers import produce, response


class ThreadComputePool(ThreadPoolExecutor):
    """An in-process service's compute pool, one thread, waited for at the end of the test
    that made it (the autouse fixture ``_join_compute_pools``): the service's stop leaves an
    engine run in progress (a calibration, a base run) to finish, and in a thread of the test
    process it would run on into the next test (a spy on the MDAV kernel there counted it)."""

    made: ClassVar[list[ThreadComputePool]] = []

    def __init__(self) -> None:
        super().__init__(1)
        ThreadComputePool.made.append(self)

    @classmethod
    def join_all(cls) -> None:
        while cls.made:
            cls.made.pop().shutdown(wait=True, cancel_futures=True)


def put_model(path: Path, engine: str, m: int, k: int,
              samples: Sequence[tuple[int, float]], params: dict[str, Any] | None = None) -> None:
    """A calibrated cost model of ``engine`` (with ``params``) for (m, k) from ``(n, seconds)``
    samples."""
    CostModelStore(path).put(engine, m, k, Calibration(
        PowerLaw.fit(*zip(*samples, strict=True)), list(samples)), params=params)


def stored_rows(n: int, m: int = 2, *, first: int = 0, seed: int | None = None) -> list[Any]:
    """``n`` store rows of m Gaussian quasi-identifiers, offsets and respondents ``first`` on
    (drawn with ``seed``, default ``first``), as the ingest stores them."""
    import numpy as np

    from streamanon.service.store import RecordRow, record_digest

    rng = np.random.default_rng(first if seed is None else seed)
    out = []
    for i in range(first, first + n):
        qi = rng.standard_normal(m).tobytes()
        out.append(RecordRow(arrived_at=1000.0 + i, partition=0, offset=i,
                             rid_hash=i.to_bytes(32, "big"),
                             digest=record_digest(qi, "{}", None), qi=qi, confidential="{}",
                             label=None))
    return out


def running_survey(config: Any, sc: Any) -> Any:
    """A :class:`~streamanon.service.survey.Survey` of ``sc`` not attached to a service: what
    the planner plans (nothing runs)."""
    from scheduler.arrivals import ArrivalEstimator
    from streamanon.service.ingest import SurveyIngest
    from streamanon.service.survey import Survey
    from streamanon.service.validation import Validator

    return Survey(sc, SurveyIngest(sc, Validator(sc, config.hmac_key or b"k" * 32)),
                  ArrivalEstimator(1.0, 10))


def one_survey(m: int = 2, **settings: Any) -> Any:
    """A :class:`~streamanon.service.survey.Survey` ``s`` of m float quasi-identifiers (and
    ``settings``), not attached to a service (:func:`running_survey`)."""
    from streamanon.service.config import parse_config

    config = parse_config({"surveys": [{"id": "s", "k": 3, **settings, "schema": {
        "rid": {"role": "identifier"},
        **{f"q{i}": {"role": "quasi_identifier", "type": "float"} for i in range(m)}}}]},
        {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32})
    return running_survey(config, config.surveys[0])


def planner_for(tmp_path: Path, survey: dict[str, Any], m: int, close_in: float,
                ) -> tuple[Any, Any]:
    """A :class:`SurveyPlanner` and its one survey ``s`` (``survey``: its settings besides id,
    close and schema; m float quasi-identifiers), closing ``close_in`` seconds from now,
    with the models stored in ``tmp_path/cost_models.json`` (nothing timed)."""
    from datetime import datetime, timedelta, timezone

    from scheduler.arrivals import ArrivalEstimator
    from streamanon.service.config import parse_config
    from streamanon.service.ingest import SurveyIngest
    from streamanon.service.planning import SurveyPlanner
    from streamanon.service.survey import Survey
    from streamanon.service.validation import Validator

    close = (datetime.now(timezone.utc) + timedelta(seconds=close_in)).isoformat()
    config = parse_config({
        "planner": {"cost_models": str(tmp_path / "cost_models.json")},
        "surveys": [{"id": "s", **survey, "close": close, "schema": {
            "rid": {"role": "identifier"},
            **{f"q{i}": {"role": "quasi_identifier", "type": "float"} for i in range(m)}}}]},
        {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32})
    sc = config.surveys[0]
    running = Survey(sc, SurveyIngest(sc, Validator(sc, config.hmac_key)),
                     ArrivalEstimator(1.0, 10))
    planner = SurveyPlanner(config, lambda sid, here: here)
    planner.load_models(running, measure=False)  # the stored models; nothing timed
    return planner, running


async def until(predicate: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def collect(service: Service, bootstrap: str, config: Any, survey: str, n: int) -> Any:
    """Send ``n`` responses and wait until they are stored and planned for; the plan."""
    await asyncio.to_thread(produce, bootstrap, config.topic(survey, "responses"),
                            [(None, response(i)) for i in range(n)])

    async def stored() -> bool:
        return (await service.status()).surveys[0].stored >= n

    await until(stored, "records not stored")

    async def planned() -> bool:  # a plan for the records stored, as the base trigger has
        plan = service.surveys[survey].last_plan
        return plan is not None and plan.n_total >= n

    await until(planned, "no plan made for the records stored")
    return service.surveys[survey].last_plan


async def run_base(service: Service, survey: str, plan: Any) -> None:
    """Start the base run on ``plan`` and wait until it is done."""
    assert await service.start_base(survey, plan)

    async def base_done() -> bool:
        return (await service.status()).surveys[0].state == BASE_DONE

    await until(base_done, "base run not done")


async def release(service: Service, survey: str) -> dict:
    """Close ``survey`` and return its release report."""
    await service.close(survey)
    await service.closed(survey, timeout=120)
    return (await service.load_release(survey)).report


def releasing_survey(config: Any, store_path: Path, rows: Sequence[Any]) -> tuple[Any, Any, Any]:
    """The survey of ``config`` wired to a SQLite store at ``store_path`` holding ``rows`` and
    to a :class:`~streamanon.service.releasing.Releaser` (no broker, no producer), its planner
    on the stored models (nothing timed): ``(survey, store, pool)``; shut the pool down and
    close the store after."""
    from scheduler.arrivals import ArrivalEstimator
    from streamanon.service.ingest import SurveyIngest
    from streamanon.service.planning import SurveyPlanner
    from streamanon.service.releasing import Releaser
    from streamanon.service.store import SQLiteStore
    from streamanon.service.survey import ServiceParts, Survey
    from streamanon.service.validation import Validator

    sc = config.surveys[0]
    sv = Survey(sc, SurveyIngest(sc, Validator(sc, config.hmac_key)), ArrivalEstimator(1.0, 10))
    planner = SurveyPlanner(config, lambda sid, here: here)
    planner.load_models(sv, measure=False)  # the stored models; nothing timed
    store = SQLiteStore(str(store_path))
    store.ensure_survey(sc.id)
    store.insert_records(sc.id, list(rows))

    async def in_store(fn: Any, *args: Any) -> Any:
        return fn(*args)

    pool = ThreadPoolExecutor(1)
    releaser = Releaser(config, store, in_store, pool, producer=None, telemetry=None)
    sv.parts = ServiceParts(config, store, in_store, pool, planner, releaser=releaser)
    return sv, store, pool
