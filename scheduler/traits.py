"""What the planner knows of a base engine and of an incremental stage, as plain data.

The engines' and the stages' facts belong to them: each declares them where it registers
(``streamanon.registry.Entry``: an engine's ``EngineTags``, a stage's ``StageTags``). The
scheduler imports nothing of streamanon, so the service reads them from the registries and
hands them here as :class:`EngineTraits` and :class:`StageTraits`; the planner's quality model
(:mod:`scheduler.quality`), its choice of engine and stage (:mod:`scheduler.choice`), the
stages' cost models (:mod:`scheduler.cost_model`) and the provisional cost models read them
from these values and from no table of their own.

Everything here is pure: numbers in, numbers out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from scheduler.cost_model import PowerLaw

#: The width and anonymity parameter the provisional cost models are stated at.
PROVISIONAL_M, PROVISIONAL_K = 15, 10


@dataclass(frozen=True)
class EngineTraits:
    """A base engine as the planner sees it.

    ``one_shot_loss`` is its one-shot information loss relative to MDAV's on the same records
    (MDAV: 1); ``auto`` whether ``engine = "auto"`` may choose it; ``provisional_cost`` its
    cost model at m = :data:`PROVISIONAL_M` and k = :data:`PROVISIONAL_K` until it is
    calibrated where it runs (None: the caller's fallback)."""

    name: str
    one_shot_loss: float = 1.0
    auto: bool = False
    provisional_cost: PowerLaw | None = None

    def __post_init__(self) -> None:
        if not self.one_shot_loss > 0:
            raise ValueError(f"{self.name}: one_shot_loss must be > 0, got "
                             f"{self.one_shot_loss!r}")

    def provisional(self, m: int, k: int) -> PowerLaw | None:
        """The provisional cost model at width ``m`` and ``k``: scaled linearly in m and
        inversely in k, as MDAV's distance scans are."""
        model = self.provisional_cost
        if model is None:
            return None
        return dataclasses.replace(model, a=model.a * (m / PROVISIONAL_M) * (PROVISIONAL_K / k))


def auto_engines(engines: Iterable[EngineTraits]) -> tuple[EngineTraits, ...]:
    """The engines ``engine = "auto"`` chooses from, quality first (the least one-shot loss,
    then by name): the planner's order of preference among plans of equal loss."""
    return tuple(sorted((e for e in engines if e.auto), key=lambda e: (e.one_shot_loss, e.name)))


@dataclass(frozen=True)
class StageTraits:
    """An incremental stage as the planner sees it; ``name`` is the stage's name, the one
    configurations, plans and reports give.

    ``nu_grid`` and ``added_loss`` are its loss curve: the information loss it adds over its
    base engine's one-shot loss at each ratio nu of the grid, linear in between
    (:func:`scheduler.quality.expected_delta`). ``cost`` is how the planner prices it, one of
    :data:`scheduler.cost_model.STAGE_COSTS` (:func:`scheduler.cost_model.stage_cost_model`).
    ``auto_rank`` says that ``incremental = "auto"`` may pick it and in which order of
    preference (lower first; None: never). The values are checked once, where the stage
    registers (``streamanon.registry.StageTags``), and handed here as they are."""

    name: str
    nu_grid: tuple[float, ...]
    added_loss: tuple[float, ...]
    cost: str
    auto_rank: int | None = None


def auto_stages(stages: Iterable[StageTraits]) -> tuple[StageTraits, ...]:
    """The stages ``incremental = "auto"`` chooses from, in their order of preference (their
    ``auto_rank``, then by name): the planner's order among plans of equal loss."""
    return tuple(sorted((s for s in stages if s.auto_rank is not None),
                        key=lambda s: (s.auto_rank, s.name)))
