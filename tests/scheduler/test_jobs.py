"""The PlanningJob's triggers, driven by a fake clock and a fake scheduler, then by APScheduler."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from scheduler.jobs import PlanningJob
from scheduler.planner import Plan

T0 = datetime(2026, 11, 25, 8, 0, tzinfo=timezone.utc)
CLOSE = T0 + timedelta(hours=10)


class FakeClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class FakeScheduler:
    """The three APScheduler calls the PlanningJob uses; ``advance`` runs what is due."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.jobs: dict[str, dict] = {}

    def add_job(self, func, trigger, id, replace_existing=False, **kw):
        assert replace_existing
        self.jobs[id] = {"func": func, "trigger": trigger, **kw,
                         "next": kw.get("run_date", self.clock.now)}

    def get_job(self, job_id):
        return self.jobs.get(job_id)

    def remove_job(self, job_id):
        del self.jobs[job_id]

    def advance(self, to: datetime, step: timedelta = timedelta(seconds=5)) -> None:
        while self.clock.now < to:
            self.clock.now = min(self.clock.now + step, to)
            for job_id, job in sorted(self.jobs.items()):
                if job_id in self.jobs and job["next"] <= self.clock.now:
                    if job["trigger"] == "interval":
                        job["next"] = self.clock.now + timedelta(seconds=job["seconds"])
                    else:
                        del self.jobs[job_id]
                    job["func"]()


def make_plan(head_start_seconds: float, nu: float = 0.1, mode: str = "optimal") -> Plan:
    return Plan(mode=mode, nu=nu, n_total=1000, t_ref=3600, head_start=head_start_seconds,
                base_seconds=1000, incremental_seconds=10)


class Recorder:
    def __init__(self) -> None:
        self.base: list[datetime] = []
        self.close: list[datetime] = []


@pytest.fixture
def setup():
    clock = FakeClock(T0)
    sched = FakeScheduler(clock)
    rec = Recorder()
    heads = {"value": 3600.0}

    job = PlanningJob(
        sched, survey_id="s1", close_at=CLOSE, clock=clock, interval_seconds=5,
        plan=lambda now: make_plan(heads["value"]),
        on_base_start=lambda plan: rec.base.append(clock.now),
        on_close=lambda: rec.close.append(clock.now),
    )
    return clock, sched, rec, heads, job


def test_base_fires_once_at_close_minus_head_start(setup):
    _clock, sched, rec, _heads, job = setup
    job.start()
    assert sched.jobs["s1:base"]["run_date"] == CLOSE - timedelta(hours=1)
    sched.advance(CLOSE + timedelta(minutes=1))
    assert rec.base == [CLOSE - timedelta(hours=1)]
    assert rec.close == [CLOSE]


def test_replanning_moves_the_trigger_and_never_fires_twice(setup):
    _clock, sched, rec, heads, job = setup
    job.start()
    sched.advance(T0 + timedelta(hours=2))
    heads["value"] = 2 * 3600.0  # arrivals slowed: start earlier
    sched.advance(T0 + timedelta(hours=2, seconds=10))
    assert sched.jobs["s1:base"]["run_date"] == CLOSE - timedelta(hours=2)
    sched.advance(CLOSE - timedelta(hours=2) + timedelta(seconds=1))
    assert len(rec.base) == 1
    heads["value"] = 1800.0  # a later plan after the base run started changes nothing
    sched.advance(CLOSE + timedelta(minutes=5))
    assert len(rec.base) == 1 and len(rec.close) == 1


def test_a_trigger_whose_time_has_passed_fires_at_once(setup):
    _clock, sched, rec, heads, job = setup
    heads["value"] = 11 * 3600.0  # head start longer than the time left: start now
    job.start()
    assert rec.base == [T0]
    assert "s1:base" not in sched.jobs


def test_replan_after_fire_is_a_no_op(setup):
    _clock, _sched, rec, heads, job = setup
    heads["value"] = 11 * 3600.0
    job.start()
    for _ in range(3):
        job.replan()
    assert len(rec.base) == 1


def test_one_shot_plan_schedules_no_base_run(setup):
    _clock, sched, rec, _heads, job = setup
    job._plan = lambda now: make_plan(0.0, nu=0.0, mode="one-shot")
    job.start()
    assert "s1:base" not in sched.jobs
    sched.advance(CLOSE)
    assert rec.base == [] and rec.close == [CLOSE]


def test_close_on_command_fires_once_and_cancels_the_base_trigger(setup):
    _clock, sched, rec, _heads, job = setup
    job.start()
    job.close_now()
    job.close_now()
    assert rec.close == [T0]
    assert sched.jobs == {}
    sched.advance(CLOSE + timedelta(hours=1))
    assert rec.base == []


def test_close_time_must_be_timezone_aware():
    with pytest.raises(ValueError, match="timezone-aware"):
        PlanningJob(None, survey_id="x", close_at=datetime(2026, 1, 1), plan=lambda now: None,
                on_base_start=lambda p: None, on_close=lambda: None)


def test_with_real_apscheduler():
    """Real BackgroundScheduler, real clock: base after ~0.5 s, close after ~1.5 s, once each."""
    scheduler = BackgroundScheduler(timezone=timezone.utc)
    scheduler.start()
    fired = {"base": [], "close": []}
    done = threading.Event()
    close_at = datetime.now(timezone.utc) + timedelta(seconds=1.5)

    def on_close():
        fired["close"].append(datetime.now(timezone.utc))
        done.set()

    job = PlanningJob(
        scheduler, survey_id="live", close_at=close_at, interval_seconds=0.2,
        plan=lambda now: make_plan(1.0),
        on_base_start=lambda plan: fired["base"].append(datetime.now(timezone.utc)),
        on_close=on_close,
    )
    try:
        job.start()
        assert done.wait(timeout=30)
    finally:
        scheduler.shutdown(wait=True)
    assert len(fired["base"]) == 1 and len(fired["close"]) == 1
    assert fired["base"][0] >= close_at - timedelta(seconds=1.05)
    assert fired["base"][0] < fired["close"][0]
    assert fired["close"][0] >= close_at - timedelta(milliseconds=50)


def test_reschedule_close_moves_both_triggers(setup):
    _clock, sched, rec, _heads, job = setup
    job.start()
    new_close = CLOSE - timedelta(hours=5)
    job.reschedule_close(new_close)
    assert sched.jobs["s1:close"]["run_date"] == new_close
    assert sched.jobs["s1:base"]["run_date"] == new_close - timedelta(hours=1)
    sched.advance(new_close + timedelta(seconds=1))
    assert rec.close == [new_close] and len(rec.base) == 1


def test_the_soon_callback_runs_at_each_replan_within_its_lead_and_never_after_the_start():
    clock = FakeClock(T0)
    sched = FakeScheduler(clock)
    soon: list[datetime] = []
    started: list[datetime] = []
    job = PlanningJob(
        sched, survey_id="s1", close_at=CLOSE, clock=clock, interval_seconds=5,
        plan=lambda now: make_plan(3600.0),
        on_base_start=lambda plan: started.append(clock.now),
        on_close=lambda: None,
        on_base_soon=lambda plan: soon.append(clock.now), soon_seconds=12)
    job.start()
    base_at = CLOSE - timedelta(hours=1)
    sched.advance(base_at - timedelta(seconds=20))
    assert soon == []  # 20 s before the moment: outside the lead
    sched.advance(base_at + timedelta(minutes=5))
    # the re-plans 10 s and 5 s before the moment, none at or after it
    assert soon == [base_at - timedelta(seconds=10), base_at - timedelta(seconds=5)]
    assert started == [base_at]



def test_a_plan_without_a_base_run_calls_the_soon_callback_before_the_close():
    """One-shot at close: the release takes every record at the close, so the service is
    told within the lead of the close as it is of a base snapshot (it reads them ahead)."""
    clock = FakeClock(T0)
    sched = FakeScheduler(clock)
    soon: list[datetime] = []
    job = PlanningJob(
        sched, survey_id="s1", close_at=CLOSE, clock=clock, interval_seconds=5,
        plan=lambda now: make_plan(0.0, nu=0.0, mode="one-shot"),
        on_base_start=lambda plan: pytest.fail("no base run in a one-shot plan"),
        on_close=lambda: None,
        on_base_soon=lambda plan: soon.append(clock.now), soon_seconds=12)
    job.start()
    sched.advance(CLOSE - timedelta(seconds=20))
    assert soon == []  # 20 s before the close: outside the lead
    sched.advance(CLOSE + timedelta(minutes=5))
    # the re-plans 10 s and 5 s before the close; none at or after it
    assert soon == [CLOSE - timedelta(seconds=10), CLOSE - timedelta(seconds=5)]
    assert "s1:base" not in sched.jobs
