"""The status snapshot of a running service: what ``/api/status``, the dashboard and
``/metrics`` read.

:func:`survey_status` turns one survey's runtime state (:class:`~.survey.Survey`), its
stored state and release, and its cost model into a :class:`~.reports.SurveyStatus`: state,
counts, plan, forecast, timings and the running stage's progress. Counts and times only, never
a data value. :meth:`~.lifecycle.Service.status` reads the store and the runtime and calls it
for each survey; :func:`within` bounds how long it waits for the store and the health checks
(:data:`STATUS_WAIT_SECONDS`).

It imports the scheduler's types and the service's reports, runtime state, states and store
rows; it reads no store and no broker itself.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Mapping
from typing import Any

from scheduler.cost_model import PowerLaw
from streamanon.service.health import PartHealth
from streamanon.service.reports import (
    PlanStatus,
    ProgressStatus,
    ReleaseReport,
    ReleaseStatus,
    SurveyStatus,
)
from streamanon.service.runtime import RunningSurvey
from streamanon.service.states import BASE_RUNNING, CLOSING
from streamanon.service.store import ReleaseRow, SurveyState


def survey_status(survey: RunningSurvey, st: SurveyState, release: ReleaseRow | None,
                  model: PowerLaw | None, *, pace: float,
                  arrivals: list[tuple[float, int]], now: float,
                  measured: bool = True, stored: int | None = None) -> SurveyStatus:
    """One survey's status at ``now``: ``st`` and ``release`` as stored, ``model`` the base
    cost model in use (``measured`` False while it is provisional), ``pace`` and ``arrivals``
    the arrival estimate and history as read under the service's lock; ``stored`` the
    survey's count of every instance (default: this instance's)."""
    sid = survey.config.id
    sc = survey.config
    plan = survey.last_plan
    close_at = sc.close_at.timestamp() if sc.close_at else None
    close_ref = st.close_requested_at or close_at
    deadline_at = (close_ref + sc.deadline
                   if close_ref is not None and sc.deadline is not None else None)
    base_at = survey.planner.base_at if survey.planner else None
    published = release is not None and release.status == "published"
    return SurveyStatus(
        id=sid, state=st.state, error=st.error, k=sc.k,
        engine=survey.engine, incremental=sc.incremental,
        received=survey.ingest.received,
        stored=survey.ingest.stored if stored is None else stored, stored_here=survey.ingest.stored,
        redelivered=survey.ingest.redelivered,
        dead_lettered=dict(survey.ingest.rejected),
        dead_lettered_total=sum(survey.ingest.rejected.values()),
        dead_letters_unsent=survey.ingest.dead_letters_unsent, releases=int(published),
        pace=pace, now=now,
        close_at=close_at, close_requested_at=st.close_requested_at,
        deadline_seconds=sc.deadline, deadline_at=deadline_at,
        base_at=base_at.timestamp() if base_at else None,
        base_started_at=st.base_started_at,
        arrival_coefficient=_finite(plan.arrival_coefficient) if plan else None,
        nu=plan.nu if plan else None,
        cost_model=None if model is None else (
            "mdav" if survey.engine == "auto" else survey.engine, model.a, model.b),
        cost_model_measured=measured,
        arrivals=arrivals,
        forecast=forecast_points(survey, now, close_at),
        progress=progress(survey, st, model, now),
        plan=None if plan is None else PlanStatus(
            mode=plan.mode, nu=plan.nu, n_total=plan.n_total,
            head_start_seconds=_finite(plan.head_start),
            finish_after_close_seconds=plan.finish_after_close,
            arrival_coefficient=_finite(plan.arrival_coefficient),
            base_at=base_at.isoformat() if base_at else None,
            refine_seconds=plan.refine_seconds, engine=plan.engine,
            expected_delta=plan.expected_delta,
            choice=None if survey.choice is None else survey.choice.reason,
            stage=plan.stage),
        release=None if release is None else ReleaseStatus.of(
            release.status, ReleaseReport.from_json(release.report)),
    )


def forecast_points(survey: RunningSurvey, now: float,
                    close_at: float | None) -> list[tuple[float, float]]:
    """The forecast arrival curve from now to the scheduled close (two points: uniform
    arrivals at the planned total), or nothing when there is no scheduled close."""
    plan = survey.last_plan
    if close_at is None or close_at <= now or plan is None or survey.ingest.closed_at:
        return []
    return [(now, float(survey.ingest.stored)), (close_at, float(max(plan.n_total,
                                                                survey.ingest.stored)))]


def progress(survey: RunningSurvey, st: SurveyState, model: PowerLaw | None,
             now: float) -> ProgressStatus | None:
    """The running stage: its start and the cost model's estimate of its length."""
    if st.state == BASE_RUNNING and st.base_started_at:
        plan = survey.last_plan
        n = plan.n_total * (1 - plan.nu) if plan else survey.ingest.stored
        expected = model(max(n, 1)) if model is not None else None
        return ProgressStatus(stage="base", started_at=st.base_started_at,
                              elapsed_seconds=now - st.base_started_at,
                              expected_seconds=expected)
    if st.state == CLOSING and st.close_requested_at:
        plan = survey.last_plan
        return ProgressStatus(stage="release", started_at=st.close_requested_at,
                              elapsed_seconds=now - st.close_requested_at,
                              expected_seconds=plan.finish_after_close if plan else None,
                              refine_seconds=plan.refine_seconds if plan else None)
    return None


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


# -- a status that does not wait for what does not answer ---------------------------------------

#: ``/api/status`` waits this long for the store and the health checks, then answers with the
#: last known stored state, marked stale: the dashboard must not go blank when an operator
#: looks at it because the store is down (it answered HTTP 500, or nothing in 10 s).
STATUS_WAIT_SECONDS = 0.8


async def within(wait: float, health: Awaitable[dict[str, PartHealth]],
                 stored: Awaitable[None], last_health: Mapping[str, PartHealth],
                 ) -> tuple[dict[str, PartHealth], list[str]]:
    """Run the health checks and the read of the stored states (``stored``) for ``wait``
    seconds at most: the parts' health (the last known when the checks take longer, the
    store marked down if it did not answer) and the parts that did not answer (``["store"]``
    or none). What is
    still running goes on; its outcome is retrieved when it ends."""
    checks, reads = asyncio.ensure_future(health), asyncio.ensure_future(stored)
    done, pending = await asyncio.wait({checks, reads}, timeout=wait)
    for task in pending:
        task.add_done_callback(_observed)
    unreachable = [] if reads in done and reads.exception() is None else ["store"]
    if checks in done and checks.exception() is None:
        return checks.result(), unreachable
    parts = dict(last_health)  # the checks go on (a broker that does not answer takes 2 s)
    if unreachable:
        parts["store"] = PartHealth(
            False, f"no answer within {wait:g} s (the status shows the last known state)")
    return parts, unreachable


async def read_stored(surveys: list[str], in_store: Any, store: Any,
                      known: dict[str, tuple[SurveyState, ReleaseRow | None]]) -> None:
    """Read each survey's stored state and release (``in_store(fn, *args)`` runs a store
    call) into ``known``: what the status shows while the store does not answer."""
    for sid in surveys:
        st = await in_store(store.survey_state, sid)
        known[sid] = (st, await in_store(store.load_release, sid))


def _observed(task: asyncio.Future) -> None:
    """Retrieve a background task's outcome (its failure is the status's business)."""
    if not task.cancelled():
        task.exception()


def never_read(sid: str) -> SurveyState:
    """A survey's stored state before the store has answered once."""
    return SurveyState(survey=sid, state="UNKNOWN", close_requested_at=None,
                       base_started_at=None, updated_at=0.0,
                       error="the store has not answered since the service started")
