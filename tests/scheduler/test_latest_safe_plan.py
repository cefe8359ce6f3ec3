"""The default plan keeps its word (issue 49): the latest snapshot whose base run ends before
the close at the upper bound of its time, the quality bound checked after, one-shot at close
when the two-stage release is not clearly sooner, and a warning when the window is too short."""

from __future__ import annotations

import pytest

from scheduler import live
from scheduler.arrivals import UniformForecast
from scheduler.overhead import DEFAULT_OVERHEAD
from scheduler.quality import QualityBound
from streamanon.service.engine_traits import engine_traits, stage_traits

#: The engines as the planner sees them: their traits from the engine registry.
MDAV_T = engine_traits("mdav")

K = 10
N = 200_000
OPEN = 120.0
FORECAST = UniformForecast(total=N, pace=N / OPEN)
BOUND = QualityBound(MDAV_T, stage_traits("nn_split_end"))


class Linear:
    """A base engine of ``per_record`` seconds a record: no prediction interval, so the plan's
    safety factor is BUSY_FACTOR or the load's slow-down."""

    def __init__(self, per_record: float) -> None:
        self.per_record = per_record

    def __call__(self, n: float) -> float:
        return self.per_record * n


def constant_stage(seconds: float):
    return lambda n_base, n_late: seconds if n_late > 0 else 0.0


def steep_stage(n_late: float, knee: float = 12_000) -> float:
    """A stage whose time grows faster with the late records past ``knee`` than the head start
    the plan gains by taking them (NN-split-end's splitting grows so at large increments):
    the earliest release by the model then takes a later snapshot than the safe one and lets
    the base run overrun the close at its upper bound."""
    return 0.2 + 4.5e-4 * max(n_late - knee, 0.0)


def latest_safe_ratio(per_record: float, safety: float) -> float:
    """The known optimum for a linear engine under uniform arrivals: the smallest nu with
    ``safety * (engine + base steps)((1 - nu) N) = nu N / pace`` (the base run, its own steps
    included, ends at the close at ``safety`` times its prediction)."""
    fixed, per = live.BASE_OVERHEAD.seconds, live.BASE_OVERHEAD.per_record
    pace = FORECAST.pace
    slope = safety * (per_record + per) * N
    return (slope + safety * fixed) / (N / pace + slope)


@pytest.mark.parametrize("slowdown", [1.0, 3.0])
@pytest.mark.parametrize("stage", ["constant", "steep"])
def test_the_default_plan_takes_the_latest_snapshot_that_ends_before_the_close(slowdown, stage):
    engine = Linear(2e-5)  # 4 s for the 200,000 records
    # constant: time alone would take any ratio past the base run's end, so only the rule
    # picks the smallest; steep: the earliest release by the model would take fewer late
    # records than the safe snapshot leaves and let the base run overrun the close
    cost = constant_stage(0.2) if stage == "constant" else (
        lambda n_base, n_late: steep_stage(n_late, knee=0.8 * latest_safe_ratio(
            engine.per_record, max(live.BUSY_FACTOR, slowdown)) * N))
    plan = live.plan(FORECAST, engine, cost, k=K, seconds_to_close=OPEN,
                     quality=BOUND, slowdown=slowdown)
    safety = max(live.BUSY_FACTOR, slowdown)
    expected = latest_safe_ratio(engine.per_record, safety)
    assert expected < BOUND.max_ratio()
    assert plan.nu == pytest.approx(expected, rel=1e-6)
    assert safety * plan.base_seconds == pytest.approx(plan.head_start, rel=1e-6)
    # never a larger increment than the safe one: the room under the bound is not spent
    assert plan.nu < plan.nu_limit


def test_when_the_quality_bound_holds_the_release_back_the_plan_says_so():
    """The base run cannot end before the close within the +5 % bound: the plan takes the
    largest ratio the bound allows and its warning names the bound, not the schedule."""
    engine = Linear(2.5e-4)  # 50 s for 200,000 records in a 120 s window
    plan = live.plan(FORECAST, engine, constant_stage(0.2), k=K, seconds_to_close=OPEN,
                     quality=BOUND)
    assert plan.nu == pytest.approx(plan.nu_limit)
    assert plan.base_seconds > plan.head_start  # the base run overruns the close
    assert any("quality bound" in w and "holds the release back" in w for w in plan.warnings)


def test_one_shot_at_close_when_the_two_stage_release_is_not_clearly_sooner():
    """A slow stage makes the two-stage release, at the upper bound of both stages, hardly
    sooner than the one-shot release: the plan releases one-shot at close and says why."""
    engine = Linear(2e-5)
    # the records are read ahead of a scheduled close: not loaded after it
    one_shot_upper = (live.BUSY_FACTOR * engine(N)
                      + DEFAULT_OVERHEAD.late_part(N, read_ahead=True))
    # the two-stage release at the upper bound: the stage's time and the late records' steps
    stage_seconds = 0.8 * one_shot_upper / live.BUSY_FACTOR
    plan = live.plan(FORECAST, engine, constant_stage(stage_seconds), k=K,
                     seconds_to_close=OPEN, quality=BOUND)
    assert plan.nu == 0.0 and plan.mode == "one-shot"
    assert any("not clearly sooner" in w for w in plan.warnings)
    # a clearly cheaper stage keeps the two-stage plan
    fast = live.plan(FORECAST, engine, constant_stage(0.1), k=K, seconds_to_close=OPEN,
                     quality=BOUND)
    assert fast.nu > 0


def test_one_shot_at_a_scheduled_close_is_priced_without_loading_its_records():
    """The 200,000-record one-shot plans were priced 0.9 s of loading that the records read
    ahead of the close no longer take (load 0.07 s): a scheduled close prices the late
    records' steps without loading them; a close on command (no time to close) with it."""
    engine = Linear(2e-5)
    slow_stage = constant_stage(10.0)  # one-shot at close, whatever the pricing
    at_close = live.plan(FORECAST, engine, slow_stage, k=K, seconds_to_close=OPEN,
                         quality=BOUND)
    assert at_close.mode == "one-shot"
    loading = DEFAULT_OVERHEAD.late_part(N) - DEFAULT_OVERHEAD.late_part(N, read_ahead=True)
    assert loading == pytest.approx(DEFAULT_OVERHEAD.steps["load"].per_late_record * N)
    assert at_close.overhead_seconds == pytest.approx(
        DEFAULT_OVERHEAD.late_part(N, read_ahead=True) - live.BASE_OVERHEAD(N))
    on_command = live.plan(FORECAST, engine, slow_stage, k=K, quality=BOUND)
    assert on_command.mode == "one-shot"
    assert on_command.overhead_seconds == pytest.approx(
        DEFAULT_OVERHEAD.late_part(N) - live.BASE_OVERHEAD(N))


def test_a_window_shorter_than_the_one_shot_run_is_warned_of_with_a_faster_engine():
    """ONA* at a 90 s window released 121 s after close (one-shot 110 s) and nothing said so
    beforehand: the warning names the engine's one-shot time, the window, and the engine that
    would release in seconds."""
    slow, fast = Linear(5.5e-4), Linear(2e-5)  # 110 s and 4 s for 200,000 records
    plan = live.plan(FORECAST, slow, constant_stage(1.0), k=K, seconds_to_close=90.0,
                     quality=BOUND)
    text = live.window_warning("ona_star", slow, plan, 90.0, alternatives={"mdav": fast})
    assert text is not None
    assert "ona_star" in text and "110 s" in text and "90 s" in text and "mdav" in text
    # a plan that releases within a minute on an engine faster than the window: nothing to say
    quick = live.plan(FORECAST, fast, constant_stage(0.2), k=K, seconds_to_close=OPEN,
                      quality=BOUND)
    assert live.window_warning("mdav", fast, quick, OPEN, alternatives={}) is None
    # a release predicted more than a minute after close is warned of too
    # (500 s one-shot in a 600 s window: the quality bound lets the base run overrun)
    late = live.plan(UniformForecast(total=N, pace=N / 600.0), Linear(2.5e-3),
                     constant_stage(0.5), k=K, seconds_to_close=600.0, quality=BOUND)
    assert late.nu > 0 and late.finish_after_close > 60
    text = live.window_warning("ona_star", Linear(2.5e-3), late, 600.0,
                               alternatives={"mdav": fast})
    assert "after close" in text and "longer than" not in text and "mdav" in text


def test_with_nothing_left_to_arrive_the_base_run_starts_now_rather_than_one_shot_at_close():
    """Every record is in and the close is 10 s away: a base run now on every record leaves
    nothing late and releases no later than one-shot at close, so the one-shot comparison does
    not turn it into a wait for the close."""
    everything = UniformForecast(total=100_000, pace=0.0)
    plan = live.plan(everything, Linear(2e-5), constant_stage(0.2), k=K,
                     seconds_to_close=10.0, quality=BOUND)
    assert plan.mode != "one-shot" and plan.nu == 0.0 and plan.n_increment == 0
    assert live.base_moment(plan, 0.0, 10.0) is not None
