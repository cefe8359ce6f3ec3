"""The parts of a survey's running state that are objects of their own: the records read ahead
of its base snapshot or close (:class:`ReadAhead`) and its arrivals over time for the dashboard
(:class:`ArrivalHistory`); the type of the service's store calls; and what the steps see of a
survey (:class:`RunningSurvey`), so that they need not import :class:`~.survey.Survey`, which
runs them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from scheduler.arrivals import ArrivalEstimator
    from scheduler.jobs import PlanningJob
    from scheduler.planner import Plan
    from streamanon.service.config import SurveyConfig
    from streamanon.service.ingest import SurveyIngest
    from streamanon.service.store import SurveyState
    from streamanon.service.validation import Closure

StoreCall = Callable[..., Awaitable[Any]]  # runs a store method on the service's store thread


@dataclass
class ReadAhead:
    """The records read ahead of the base snapshot (``streamanon.service.base_run``), or of
    the close when the plan has no base run: the parts read so far, every record up to the
    clean cut ``cut``. ``epoch`` changes whenever
    they are dropped, so that a read in progress then keeps nothing."""

    cut: int = 0
    parts: list[Any] = field(default_factory=list)
    epoch: int = 0
    task: asyncio.Task | None = None  # the read in progress

    def drop(self) -> None:
        """Forget what was read; a read in progress keeps nothing."""
        self.epoch += 1
        self.cut = 0
        self.parts = []

    def take(self) -> tuple[list[Any], int]:
        """What was read and its cut, handed over and forgotten here (:meth:`drop`): a read
        in progress keeps nothing, so the taker reads every record after the cut itself."""
        parts, cut = self.parts, self.cut
        self.drop()
        return parts, cut

    def cancel(self) -> None:
        """:meth:`drop`, and cancel a read in progress (the service stops, or leads no more)."""
        self.drop()
        if self.task is not None and not self.task.done():
            self.task.cancel()


class ArrivalHistory:
    """Cumulative stored records over time for the dashboard chart: at most ``limit`` points,
    thinned by halving when full (so the whole survey stays on the chart). Counts only."""

    def __init__(self, limit: int = 600) -> None:
        self.limit = limit
        self.points: list[tuple[float, int]] = []
        self.spacing = 1.0  # seconds between kept points

    def add(self, t: float, count: int) -> None:
        if self.points and t - self.points[-1][0] < self.spacing:
            self.points[-1] = (self.points[-1][0], count)  # latest count, same slot
            return
        self.points.append((t, count))
        if len(self.points) > self.limit:
            self.points = self.points[::2] + ([self.points[-1]] if len(self.points) % 2 == 0
                                              else [])
            self.spacing *= 2


@dataclass(frozen=True)
class Settled:
    """An ``auto`` setting settled: the ``name`` chosen (an engine or a stage), why, and the
    expected loss against one-shot MDAV when the planner gave one."""

    name: str
    reason: str
    expected_delta: float | None = None

    def report(self) -> dict[str, Any]:
        """What the release report keeps of it: ``incremental_choice``; ``engine_choice`` adds
        the expected delta (:meth:`Chosen.engine_report`)."""
        return {"configured": "auto", "chosen": self.name, "reason": self.reason}


@dataclass(frozen=True)
class Chosen:
    """What a survey's ``auto`` settings became: the base engine of ``engine = "auto"`` (when
    the base run starts, or at close without one) and the incremental stage of
    ``incremental = "auto"`` (at close, for the real counts). The configuration keeps
    ``"auto"``; the survey's :attr:`~.survey.Survey.engine` and
    :attr:`~.survey.Survey.stage` read the chosen value first."""

    engine: Settled | None = None
    stage: Settled | None = None

    def engine_report(self) -> dict[str, Any] | None:
        """The report's ``engine_choice``: what was chosen, why, the expected delta."""
        if self.engine is None:
            return None
        return self.engine.report() | {"expected_delta": self.engine.expected_delta}

    def stage_report(self) -> dict[str, Any] | None:
        """The report's ``incremental_choice``."""
        return None if self.stage is None else self.stage.report()


@dataclass
class PlanState:
    """What the planner keeps of one survey (:class:`~.planning.SurveyPlanner`): the cost
    models it plans with, the candidates of ``engine = "auto"`` or ``incremental = "auto"``,
    whether the models are still provisional, when they were measured, when it was first
    planned here, and the share of its records the base engine runs on."""

    models: tuple[Any, Any] | None = None  # (base, incremental) cost models in use
    options: list[Any] | None = None  # scheduler.choice.Option: the candidates, if any
    provisional: bool = False  # planned with provisional models until measured ones come
    measured: asyncio.Event = field(default_factory=asyncio.Event)  # the models measured
    first_plan: float | None = None  # when the survey was first planned here
    #: The share of the records the base engine ran on in the last base run (or the records
    #: read ahead show): with repeated keys, the rare tuples' respondents only (distinct-tuple
    #: microaggregation); the plans price the engine at that share.
    work_share: float = 1.0


class RunningSurvey(Protocol):
    """What the steps (the base run, the close, the release), the planner, the status and the
    lease see of a survey: :class:`~.survey.Survey` is the one there is. The steps read its
    fields, and change its state only through its methods: no module but ``survey.py``
    assigns a survey's field at any depth (``tests/test_architecture.py``,
    ``survey_writers``)."""

    config: SurveyConfig
    ingest: SurveyIngest
    estimator: ArrivalEstimator
    lock: threading.Lock
    state: str | None
    planner: PlanningJob | None
    last_plan: Plan | None
    base_task: asyncio.Task | None
    close_task: asyncio.Task | None
    closed_event: asyncio.Event
    timings: dict[str, float]
    base_steps: dict[str, float]
    base_plan: Plan | None
    read_ahead: ReadAhead
    base_release: tuple[int, Any] | None
    history: ArrivalHistory
    choice: Any
    chosen: Chosen
    window_warning: str | None
    plans: PlanState

    @property
    def id(self) -> str: ...

    @property
    def auto_engine(self) -> bool: ...

    @property
    def engine(self) -> str: ...

    @property
    def stage(self) -> str: ...

    @property
    def engine_choice(self) -> dict[str, Any] | None: ...

    def settle_engine(self, engine: str, why: str, expected: float | None = None,
                      models: tuple[Any, Any] | None = None) -> None: ...

    def unsettle_engine(self, models: tuple[Any, Any]) -> None: ...

    def settle_stage(self, stage: str, why: str) -> None: ...

    def adopt_models(self, models: tuple[Any, Any], options: list[Any] | None, *,
                     provisional: bool) -> None: ...

    def keep_plan(self, plan: Plan, choice: Any, at: float) -> float: ...

    def warn_of_window(self, warning: str) -> bool: ...

    def observe_work_share(self, share: float) -> None: ...

    async def stored_state(self) -> SurveyState: ...

    async def move(self, to: str, why: str, **fields: Any) -> SurveyState: ...

    def record(self, step: str, seconds: float) -> None: ...

    def released(self) -> None: ...

    def base_release_used(self) -> None: ...

    def closing(self, closed_at: float) -> None: ...

    def drained(self, closure: Closure, seconds: float) -> None: ...
