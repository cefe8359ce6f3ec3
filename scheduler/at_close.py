"""What a release does at close, decided from numbers (design spec §5, §6).

At close the service holds every record (``n``) and, when a base run finished, the checkpoint of
its snapshot (``n_base``). It then either runs the base engine once on every record
(*one-shot*) or keeps the base run's cells and lets the incremental stage place the late
records (*two-stage*). One-shot is taken when there is no base, when the core's small-base rule
refuses it (:func:`streamanon.incremental.base_is_usable`, applied by the caller), or when a
deadline leaves time for one run on everything, which loses less. A survey with
``incremental = "auto"`` has its stage chosen here for the real counts
(:func:`scheduler.choice.choose_stage`), and a refinement under a deadline ends where the
deadline less the reserve for the steps after the compute is
(:func:`scheduler.live.deadline_reserve`).

:func:`decide_at_close` returns the decision as a :class:`CloseDecision`; the service executes
it (:meth:`streamanon.service.releasing.Releaser.write`). Pure: numbers, cost models and names
in, a value out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from scheduler import live
from scheduler.choice import choose_stage
from scheduler.overhead import DEFAULT_OVERHEAD, ReleaseOverhead
from scheduler.planner import BaseCost, IncrementalCost
from scheduler.traits import EngineTraits

#: One run on every record is taken at close when its predicted time is within this share of
#: the deadline's compute budget (:func:`scheduler.live.compute_budget`): the rest is margin
#: for a prediction that runs long.
ONE_SHOT_SHARE = 0.8


@dataclass(frozen=True)
class AutoStage:
    """What ``incremental = "auto"`` chooses from at close: the candidate stages' ``names`` in
    order of preference, their cost ``models`` keyed as :func:`scheduler.choice.choose_stage`
    takes them (each stage's traits; none: the first name is taken, there is nothing to
    choose by), the base ``engine``'s traits (the quality model's; needed with models), the
    quality bound ``max_delta`` (None: ``objective = "earliest"``) and the
    ``overhead_model`` of the steps the late records add."""

    names: Sequence[str]
    models: Mapping[Any, IncrementalCost] = field(default_factory=dict)
    engine: EngineTraits | None = None
    max_delta: float | None = None
    overhead_model: ReleaseOverhead = DEFAULT_OVERHEAD


@dataclass(frozen=True)
class CloseDecision:
    """How the release is made at close.

    ``mode``: ``"one-shot"`` (one engine run on every record) or ``"two-stage"`` (the base
    cells plus the incremental stage); ``why`` the mode was taken; ``stage`` the incremental
    stage of a two-stage release (None one-shot); ``stage_reason`` why ``incremental =
    "auto"`` chose it (None when the survey names its stage, or one-shot); ``refine_until`` the
    moment (:func:`time.time` clock) the refinement ends by, None without a deadline or a
    refinement."""

    mode: Literal["one-shot", "two-stage"]
    why: str
    stage: str | None = None
    stage_reason: str | None = None
    refine_until: float | None = None

    @property
    def two_stage(self) -> bool:
        return self.mode == "two-stage"

    @property
    def stage_chosen(self) -> bool:
        """Whether ``incremental = "auto"`` chose :attr:`stage` at this close."""
        return self.stage_reason is not None


def fits_deadline(n: int, deadline: float | None, base_model: BaseCost) -> bool:
    """Whether one run of the base engine on all ``n`` records fits the ``deadline`` (seconds
    after close): its predicted time within :data:`ONE_SHOT_SHARE` of the compute budget."""
    return deadline is not None and base_model(n) <= ONE_SHOT_SHARE * live.compute_budget(
        deadline, n)


def close_mode(n: int, n_base: int | None, *, base_usable: bool, deadline: float | None,
               base_model: BaseCost) -> tuple[Literal["one-shot", "two-stage"], str]:
    """One-shot or two-stage for ``n`` records after a base of ``n_base`` (None: no base run),
    and why. ``base_usable``: the core's small-base rule on these counts."""
    if n_base is None:
        return "one-shot", "no base run"
    if fits_deadline(n, deadline, base_model):
        return "one-shot", (f"one run on all {n} records fits the deadline of "
                            f"{deadline:g} s")
    if not base_usable:
        return "one-shot", f"the base of {n_base} records is not usable for {n} records"
    return "two-stage", f"a base of {n_base} records and {n - n_base} late records"


def stage_at_close(stage: str, n_base: int, n_late: int,
                 auto: AutoStage | None) -> tuple[str, str | None]:
    """The incremental stage of a two-stage release: ``stage`` as the survey names it, or,
    when it is ``"auto"``, the one chosen for ``n_late`` records after ``n_base``
    (:func:`scheduler.choice.choose_stage`) and why."""
    if stage != "auto":
        return stage, None
    if auto is None or not auto.names:
        raise ValueError('incremental = "auto" at close needs its candidate stages')
    if not auto.models:
        return auto.names[0], "no cost models to choose by"
    if auto.engine is None:
        raise ValueError("choosing a stage by its cost models needs the base engine's traits")
    return choose_stage(n_base, n_late, auto.models, engine=auto.engine,
                        max_delta=auto.max_delta, overhead_model=auto.overhead_model)


def refine_deadline(n: int, late: int, *, deadline: float | None, closed_at: float | None,
                    now: float, refine: bool) -> float | None:
    """When the refinement ends: the close (``closed_at``, else ``now``) plus the deadline
    less the reserve for the steps after the compute, ``late`` of the ``n`` records not in a
    base release (:func:`scheduler.live.deadline_reserve`); None without a refinement or a
    deadline (the refinement's own budget then)."""
    if not refine or deadline is None:
        return None
    return (closed_at or now) + deadline - live.deadline_reserve(n, late=late)


def decide_at_close(n: int, n_base: int | None, *, base_usable: bool, stage: str,
                    deadline: float | None, closed_at: float | None, now: float,
                    base_model: BaseCost, refine: bool,
                    auto: AutoStage | None = None) -> CloseDecision:
    """The release at close of ``n`` records, after a base run on ``n_base`` (None: none).

    ``base_usable``: whether the core's small-base rule takes that base for these counts;
    ``stage``: the survey's incremental stage (a name, or ``"auto"``: chosen from ``auto``);
    ``deadline``: seconds after close (None: none); ``closed_at``: when the close was
    requested (None: ``now`` stands in); ``base_model``: the base engine's cost model;
    ``refine``: whether the survey refines."""
    mode, why = close_mode(n, n_base, base_usable=base_usable, deadline=deadline,
                           base_model=base_model)
    if mode == "one-shot" or n_base is None:
        return CloseDecision(mode, why, refine_until=refine_deadline(
            n, n, deadline=deadline, closed_at=closed_at, now=now, refine=refine))
    chosen, reason = stage_at_close(stage, n_base, n - n_base, auto)
    return CloseDecision(mode, why, chosen, reason, refine_deadline(
        n, n - n_base, deadline=deadline, closed_at=closed_at, now=now, refine=refine))
