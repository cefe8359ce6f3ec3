"""What the planner knows of a base engine, as plain data.

The engines' facts belong to the engines: each declares them where it registers
(``streamanon.registry.Entry``). The scheduler imports nothing of streamanon, so the service
reads them from the registry and hands them here as :class:`EngineTraits`; the planner's
quality model (:mod:`scheduler.quality`), its choice of engine (:mod:`scheduler.choice`) and
the provisional cost models read them from these values and from no table of their own.

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
