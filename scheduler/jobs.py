"""APScheduler jobs that act on the plan: re-plan every few seconds, start the base run once,
close the survey once (specification section 6, step 4: docs/design/specification.md).

:class:`PlanningJob` owns three jobs on an APScheduler scheduler: ``<survey>:replan`` (interval),
``<survey>:base`` (date, moved by every re-plan) and ``<survey>:close`` (date). What to do is
injected: ``plan(now)`` returns a :class:`~scheduler.planner.Plan` (the service's comes from
:func:`scheduler.live.plan`), ``on_base_start(plan)`` takes the snapshot and starts the base
run, ``on_close()`` closes the survey; the base trigger is set at
:func:`scheduler.live.base_moment`. ``on_base_soon(plan)``, optional, is called at every
re-plan within ``soon_seconds`` of that moment, or of the close when the plan has no base run
(the service reads the snapshot's records ahead then, so that the base run, or the release made
whole at close, starts on them at once). The clock is injected too, so tests drive
it with a fake clock and a fake scheduler and no service.

Guarantees: the base trigger fires at most once however often the plan moves it; a trigger
whose time has already passed fires at once; the close trigger fires at most once, and after
it the base trigger never fires (a survey that closes before its base run starts is run
one-shot by the close handler).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from scheduler.live import base_moment
from scheduler.planner import Plan

log = logging.getLogger(__name__)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class PlanningJob:
    """Keeps one survey's base and close triggers where the latest plan says.

    Parameters
    ----------
    scheduler
        An APScheduler 3 scheduler (or anything with ``add_job``, ``remove_job``, ``get_job``).
    survey_id
        Used in job ids and log lines.
    close_at
        The scheduled close (timezone-aware), or None to close on command (:meth:`close_now`).
    plan
        ``plan(now) -> Plan``: the current plan, re-estimated from the arrivals so far.
    on_base_start, on_close
        Callbacks; each runs at most once.
    ready
        ``ready(now) -> bool``: whether the forecast behind the plan may be acted on
        (:func:`scheduler.live.forecast_ready`). Until it is, the plan is made and kept but
        the base run does not start. Default: always.
    on_base_soon, soon_seconds
        ``on_base_soon(plan)`` is called at each re-plan that puts the base trigger in the
        future but within ``soon_seconds`` of now, or, when the plan has no base run (one-shot
        at close), the scheduled close (never after the base run has started or the survey
        closed). Default: none.
    clock
        ``clock() -> datetime`` (aware). Default: UTC wall clock.
    interval_seconds
        How often to re-plan.
    """

    def __init__(
        self,
        scheduler: Any,
        *,
        survey_id: str,
        close_at: datetime | None,
        plan: Callable[[datetime], Plan],
        on_base_start: Callable[[Plan], None],
        on_close: Callable[[], None],
        clock: Callable[[], datetime] = utc_now,
        interval_seconds: float = 5.0,
        ready: Callable[[datetime], bool] | None = None,
        on_base_soon: Callable[[Plan], None] | None = None,
        soon_seconds: float = 0.0,
    ) -> None:
        if close_at is not None and close_at.tzinfo is None:
            raise ValueError("close_at must be timezone-aware")
        self.scheduler = scheduler
        self.survey_id = survey_id
        self.close_at = close_at
        self._plan = plan
        self._on_base_start = on_base_start
        self._on_close = on_close
        self.clock = clock
        self.interval_seconds = interval_seconds
        self._ready = ready
        self._on_base_soon = on_base_soon
        self.soon_seconds = soon_seconds
        self._waiting_logged = False
        self.last_plan: Plan | None = None
        self.base_at: datetime | None = None
        self.base_started = False
        self.closed = False
        self._lock = threading.Lock()

    @property
    def _base_id(self) -> str:
        return f"{self.survey_id}:base"

    @property
    def _close_id(self) -> str:
        return f"{self.survey_id}:close"

    @property
    def _replan_id(self) -> str:
        return f"{self.survey_id}:replan"

    def start(self) -> None:
        """Register the jobs and plan once right away."""
        if self.close_at is not None:
            self._schedule(self._close_id, self._fire_close, self.close_at)
        self.scheduler.add_job(
            self.replan, "interval", seconds=self.interval_seconds, id=self._replan_id,
            replace_existing=True, max_instances=1, coalesce=True,
        )
        self.replan()

    def stop(self) -> None:
        for job_id in (self._replan_id, self._base_id, self._close_id):
            self._remove(job_id)

    def replan(self) -> Plan | None:
        """Re-estimate and move the base trigger; fire it now if its moment has passed."""
        with self._lock:
            if self.base_started or self.closed:
                return self.last_plan
            now = self.clock()
            plan = self._plan(now)
            self.last_plan = plan
            fire_at = base_moment(plan, now, self.close_at)
            self.base_at = fire_at
        if fire_at is None:
            self._remove(self._base_id)
            if self.close_at is not None and now < self.close_at:
                self._soon(plan, now, self.close_at)  # every record is read at the close
            return plan
        if fire_at <= now:
            self._fire_base()
            return plan
        self._schedule(self._base_id, self._fire_base, fire_at)
        self._soon(plan, now, fire_at)
        return plan

    def _soon(self, plan: Plan, now: datetime, moment: datetime) -> None:
        """``on_base_soon(plan)`` when ``moment`` (the snapshot's, or the close's) is within
        ``soon_seconds`` and neither the base run nor the close has started."""
        if self._on_base_soon is None or (moment - now).total_seconds() > self.soon_seconds:
            return
        with self._lock:
            soon = not (self.base_started or self.closed)
        if soon:
            self._on_base_soon(plan)

    def reschedule_close(self, close_at: datetime) -> None:
        """Move the scheduled close; the next re-plan moves the base trigger accordingly."""
        if close_at.tzinfo is None:
            raise ValueError("close_at must be timezone-aware")
        with self._lock:
            if self.closed:
                return
            self.close_at = close_at
        self._schedule(self._close_id, self._fire_close, close_at)
        self.replan()

    def close_now(self) -> None:
        """Close on command (control message, CLI or HTTP)."""
        self._fire_close()

    def _fire_base(self) -> None:
        with self._lock:
            if self.base_started or self.closed:
                return
            if self._ready is not None and not self._ready(self.clock()):
                if not self._waiting_logged:  # the next re-plan tries again
                    log.info("survey %s: the plan says start the base run, but too few "
                             "arrivals have been seen to forecast, or the snapshot would hold "
                             "fewer records than the plan counts on; waiting",
                             self.survey_id)
                    self._waiting_logged = True
                return
            self.base_started = True
            plan = self.last_plan
        self._remove(self._base_id)
        log.info("survey %s: base run triggered (nu = %.4f)", self.survey_id,
                 plan.nu if plan else float("nan"))
        self._on_base_start(plan)

    def _fire_close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        for job_id in (self._base_id, self._replan_id, self._close_id):
            self._remove(job_id)
        log.info("survey %s: close triggered", self.survey_id)
        self._on_close()

    def _schedule(self, job_id: str, func: Callable[[], None], when: datetime) -> None:
        self.scheduler.add_job(func, "date", run_date=when, id=job_id, replace_existing=True,
                               misfire_grace_time=None)

    def _remove(self, job_id: str) -> None:
        if self.scheduler.get_job(job_id) is not None:
            with contextlib.suppress(LookupError):  # fired and removed in between
                self.scheduler.remove_job(job_id)
