"""The expected information loss of a two-stage release, and the ratio nu a loss bound allows.

A two-stage release keeps its base engine's loss on the base records and pays the incremental
stage's on the late ones, so its loss grows with nu. The planner's default objective
(:func:`scheduler.live.plan` with a :class:`QualityBound`) releases as early as it can among
the ratios whose expected loss stays within a bound of the same engine's one-shot release;
``engine = "auto"`` (:mod:`scheduler.choice`) ranks engines by the same model.

The model is empirical, measured in this repository (the "engines and incremental stages"
page of the documentation): the one-shot loss of each engine relative to MDAV (its
``one_shot_loss``, :class:`scheduler.traits.EngineTraits`, which each engine declares where it
registers; Gaussian and census-like data, k = 10), and the loss each incremental
stage adds at a ratio nu over an MDAV base (its loss curve, ``nu_grid`` and ``added_loss`` of
:class:`scheduler.traits.StageTraits`, which each stage declares where it registers; Gaussian
50,000 x 15, k = 10), mixed as :func:`expected_delta` says. It ranks plans; it does not predict
a survey's loss to the percent (the stage's loss grows as m falls: at m = 5 NN-split-end adds
4.7 % at nu = 0.1 where its curve says 2.1 %).

Everything here is pure: numbers in, numbers out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from scheduler.traits import EngineTraits, StageTraits

#: The default bound of the expected loss against the same engine's one-shot release.
DEFAULT_MAX_DELTA = 0.05


def expected_delta(engine: EngineTraits, stage: StageTraits, nu: float) -> float:
    """The expected information loss of a release (``engine`` on the base, ``stage`` on the
    fraction ``nu`` that came later) relative to one-shot MDAV on all records, less one.

    A mixture: the base records keep their engine's one-shot loss, the late ones MDAV's, and
    the stage adds its measured loss at ``nu`` (its loss curve). Over an MDAV base it is the
    measured curve itself; as nu nears 1 it is what the stage alone gives whatever the base."""
    nu = min(max(nu, 0.0), 1.0)
    added = float(np.interp(nu, stage.nu_grid, stage.added_loss))
    return engine.one_shot_loss * (1.0 - nu) + nu + added - 1.0


def delta_against_one_shot(engine: EngineTraits, stage: StageTraits, nu: float) -> float:
    """:func:`expected_delta` relative to the one-shot release of the same ``engine`` (the
    delta a release reports), less one."""
    return (1.0 + expected_delta(engine, stage, nu)) / engine.one_shot_loss - 1.0


@dataclass(frozen=True)
class QualityBound:
    """The quality side of the planner's default objective: the expected loss of the release
    (``engine`` on the base, ``stage`` on the late records) may exceed the one-shot release of
    the same engine by at most ``max_delta`` (0.05: +5 %)."""

    engine: EngineTraits
    stage: StageTraits
    max_delta: float = DEFAULT_MAX_DELTA

    def __post_init__(self) -> None:
        if not isinstance(self.stage, StageTraits):  # a name would have no loss curve
            raise TypeError(f"stage must be the stage's traits (StageTraits), got "
                            f"{self.stage!r}")
        if not (self.max_delta >= 0 and np.isfinite(self.max_delta)):
            raise ValueError(f"max_delta must be a finite number >= 0, got {self.max_delta!r}")

    def delta(self, nu: float) -> float:
        return delta_against_one_shot(self.engine, self.stage, nu)

    def max_ratio(self) -> float:
        """The largest nu whose expected delta is within the bound (the model is increasing
        in nu up to where it may flatten; the first crossing counts)."""
        return _max_ratio(self.engine, self.stage, float(self.max_delta))


@functools.lru_cache(maxsize=256)
def _max_ratio(engine: EngineTraits, stage: StageTraits, max_delta: float) -> float:
    grid = np.linspace(0.0, 1.0, 10_001)
    deltas = np.array([delta_against_one_shot(engine, stage, float(nu)) for nu in grid])
    over = np.flatnonzero(deltas > max_delta + 1e-12)
    if over.size == 0:
        return 1.0
    i = int(over[0])
    if i == 0:
        return 0.0
    lo, hi = grid[i - 1], grid[i]  # linear between the grid's neighbours
    d_lo, d_hi = deltas[i - 1], deltas[i]
    return float(lo + (hi - lo) * (max_delta - d_lo) / (d_hi - d_lo))
