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
stage adds at a ratio nu over an MDAV base (:data:`STAGE_DELTA`, Gaussian 50,000 x 15,
k = 10), mixed as :func:`expected_delta` says. It ranks plans; it does not predict a survey's
loss to the percent (the stage's loss grows as m falls: at m = 5 NN-split-end adds 4.7 % at
nu = 0.1 where the table says 2.1 %).

Everything here is pure: numbers in, numbers out.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from scheduler.traits import EngineTraits

#: The loss an incremental stage adds over its base engine's one-shot loss, by nu, over an
#: MDAV base (m = 15, k = 10, 50,000 Gaussian records); linear in between. ``nn_split_mid`` is
#: taken as ``nn_split_end`` and ``nn_inertial`` as ``nn`` (they measured the same).
_NU = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9, 1.0)
_SPLIT_END = (0.0, 0.0021, 0.0104, 0.0210, 0.0469, 0.0718, 0.0847, 0.0796, 0.0894, 0.1182,
              0.1182)
_NN = (0.0, 0.0021, 0.0104, 0.0210, 0.0470, 0.0748, 0.1081, 0.1478, 0.2589, 0.5044, 0.5044)
STAGE_DELTA: Mapping[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "two_stage": (_NU, (0.0, 0.0098, 0.0309, 0.0485, 0.0740, 0.0860, 0.0945, 0.0978, 0.0875,
                        0.0489, 0.0489)),
    "nn_split_end": (_NU, _SPLIT_END),
    "nn_split_mid": (_NU, _SPLIT_END),
    "nn": (_NU, _NN),
    "nn_inertial": (_NU, _NN),
}

#: The default bound of the expected loss against the same engine's one-shot release.
DEFAULT_MAX_DELTA = 0.05


def expected_delta(engine: EngineTraits, stage: str, nu: float) -> float:
    """The expected information loss of a release (``engine`` on the base, ``stage`` on the
    fraction ``nu`` that came later) relative to one-shot MDAV on all records, less one.

    A mixture: the base records keep their engine's one-shot loss, the late ones MDAV's, and
    the stage adds its measured loss at ``nu``. Over an MDAV base it is the measured curve
    itself; as nu nears 1 it is what the stage alone gives whatever the base."""
    nu = min(max(nu, 0.0), 1.0)
    xs, ys = STAGE_DELTA.get(stage, STAGE_DELTA["two_stage"])
    return engine.one_shot_loss * (1.0 - nu) + nu + float(np.interp(nu, xs, ys)) - 1.0


def delta_against_one_shot(engine: EngineTraits, stage: str, nu: float) -> float:
    """:func:`expected_delta` relative to the one-shot release of the same ``engine`` (the
    delta a release reports), less one."""
    return (1.0 + expected_delta(engine, stage, nu)) / engine.one_shot_loss - 1.0


@dataclass(frozen=True)
class QualityBound:
    """The quality side of the planner's default objective: the expected loss of the release
    (``engine`` on the base, ``stage`` on the late records) may exceed the one-shot release of
    the same engine by at most ``max_delta`` (0.05: +5 %)."""

    engine: EngineTraits
    stage: str
    max_delta: float = DEFAULT_MAX_DELTA

    def __post_init__(self) -> None:
        if not (self.max_delta >= 0 and np.isfinite(self.max_delta)):
            raise ValueError(f"max_delta must be a finite number >= 0, got {self.max_delta!r}")

    def delta(self, nu: float) -> float:
        return delta_against_one_shot(self.engine, self.stage, nu)

    def max_ratio(self) -> float:
        """The largest nu whose expected delta is within the bound (the model is increasing
        in nu up to where it may flatten; the first crossing counts)."""
        return _max_ratio(self.engine, self.stage, float(self.max_delta))


@functools.lru_cache(maxsize=256)
def _max_ratio(engine: EngineTraits, stage: str, max_delta: float) -> float:
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
