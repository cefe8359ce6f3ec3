"""One release from two stages: a base engine on the snapshot, an incremental stage at close.

:class:`TwoStageRun` composes any registered base engine with any registered incremental
stage, times each stage, and measures the release the way design spec §3 asks: the two-stage
distortion ``D_T`` is one SSE over the whole release divided by its SST (which equals
``(1 - nu) D_0 + nu D_+`` in the paper's notation). Asked to, it also runs the one-shot
("traditional") reference on all records and reports ``delta = (D_T - D) / D`` and the
relative times ``tau_0``, ``tau_+`` of paper 001.

A base snapshot too small to build on (:func:`~streamanon.incremental.base_is_usable`, fewer
than 2k records) is not run: the stage microaggregates the whole union one-shot.

``refine`` (``"off"``, ``"auto"`` or seconds; :mod:`streamanon.refine`) adds the anytime
refinement after the incremental stage of a two-stage partition: local search that starts at
the cells of the late records and stops at its budget (and by ``refine_until``, a
:func:`time.time` moment, when given).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamanon.engines.base import get_engine, run_engine
from streamanon.errors import ParameterError
from streamanon.incremental.base import base_is_usable, get_stage, run_stage
from streamanon.metrics import distortion, relative_distortion_increase
from streamanon.refine import (
    Refinement,
    parse_refine,
    refine_partition,
    refine_window,
    window_budget,
)


@dataclass
class Partition:
    """Labels of the union (arrival order), how they were made and what each stage cost.

    ``mode`` is ``"two-stage"`` (base cells, then the incremental stage) or ``"one-shot"``
    (one engine run on all records: no base, or one too small to build on).
    """

    labels: np.ndarray
    mode: str
    n_base: int
    n_increment: int
    base_seconds: float
    incremental_seconds: float
    refinement: Refinement | None = field(default=None, kw_only=True)  # after the stage

    @property
    def refine_seconds(self) -> float:
        return 0.0 if self.refinement is None else self.refinement.seconds

    @property
    def nu(self) -> float:
        return self.n_increment / (self.n_base + self.n_increment)


@dataclass
class TwoStageResult(Partition):
    """A partition with its distortion, and optionally the one-shot reference's."""

    distortion: float  # D_T, one SSE over the whole release
    one_shot_seconds: float | None = None
    one_shot_distortion: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tau_0(self) -> float | None:
        return self.base_seconds / self.one_shot_seconds if self.one_shot_seconds else None

    @property
    def tau_plus(self) -> float | None:
        return self.incremental_seconds / self.one_shot_seconds if self.one_shot_seconds else None

    @property
    def delta(self) -> float | None:
        if self.one_shot_distortion is None:
            return None
        return relative_distortion_increase(self.distortion, self.one_shot_distortion)

    def report(self) -> dict[str, Any]:
        return {
            "nu": self.nu,
            "n_0": self.n_base,
            "n_plus": self.n_increment,
            "base_seconds": self.base_seconds,
            "incremental_seconds": self.incremental_seconds,
            "refine_seconds": self.refine_seconds,
            "refine_stopped": None if self.refinement is None else self.refinement.stopped,
            "distortion_two_stage": self.distortion,
            "one_shot_seconds": self.one_shot_seconds,
            "one_shot_distortion": self.one_shot_distortion,
            "tau_0": self.tau_0,
            "tau_plus": self.tau_plus,
            "delta": self.delta,
        }


class TwoStageRun:
    """Base engine on the first ``n_base`` records, incremental stage on the rest.

    Parameters
    ----------
    k
        Anonymity parameter.
    engine
        Base engine name (``streamanon engines``), with ``engine_params``.
    incremental
        Incremental stage name, with ``incremental_params``.
    refine
        Anytime refinement after the incremental stage: ``"off"`` (default), ``"auto"`` or
        seconds (:func:`streamanon.refine.refine_window`); ``refine_until`` (a
        :func:`time.time` moment, e.g. the deadline less the release overhead) also ends it.

    Examples
    --------
    >>> import numpy as np
    >>> Z = np.random.default_rng(0).standard_normal((500, 3))
    >>> result = TwoStageRun(k=5, incremental="nn_split_end").run(Z, n_base=450)
    >>> result.n_base, result.n_increment, round(result.nu, 2)
    (450, 50, 0.1)
    >>> int(np.bincount(result.labels).min()) >= 5
    True
    """

    def __init__(self, k: int, engine: str = "mdav", incremental: str = "two_stage", *,
                 engine_params: dict[str, Any] | None = None,
                 incremental_params: dict[str, Any] | None = None,
                 refine: str | float = "off", refine_until: float | None = None) -> None:
        get_engine(engine)
        get_stage(incremental)
        self.k = int(k)
        self.engine = engine
        self.incremental = incremental
        self.engine_params = dict(engine_params or {})
        self.incremental_params = dict(incremental_params or {})
        self.refine = parse_refine(refine)
        self.refine_until = refine_until

    def warm_up(self, Z: np.ndarray) -> None:
        """Run both stages once on a few records, so that loading compiled kernels is not
        counted in the timings that are compared."""
        small = Z[: min(len(Z), 6 * self.k)]
        if len(small) >= 3 * self.k:
            labels, _ = self.run_base(small[: 2 * self.k])
            self.run_increment(small[: 2 * self.k], labels, small[2 * self.k:])

    def base_params(self, n_base: int) -> dict[str, Any]:
        """The engine parameters for the first ``n_base`` records: per-record ones (a class
        label, confidential attributes) cut to those rows."""
        per_record = get_engine(self.engine).per_record
        return {name: (np.asarray(value)[:n_base] if name in per_record else value)
                for name, value in self.engine_params.items()}

    def run_base(self, base: np.ndarray) -> tuple[np.ndarray, float]:
        started = time.perf_counter()
        labels = run_engine(self.engine, base, self.k, **self.base_params(len(base)))
        return labels, time.perf_counter() - started

    def run_increment(self, base: np.ndarray, base_labels: np.ndarray,
                      increment: np.ndarray) -> tuple[np.ndarray, float]:
        started = time.perf_counter()
        labels = run_stage(self.incremental, base, base_labels, increment, self.k,
                           **self.incremental_params)
        return labels, time.perf_counter() - started

    def run_one_shot(self, Z: np.ndarray) -> tuple[np.ndarray, float]:
        """The engine on all records: the one-shot ("traditional") labels and their time."""
        started = time.perf_counter()
        labels = run_engine(self.engine, Z, self.k, **self.engine_params)
        return labels, time.perf_counter() - started

    def one_shot(self, Z: np.ndarray) -> Partition:
        """The one-shot partition of standardised records ``Z``: no base snapshot."""
        labels, seconds = self.run_one_shot(Z)
        return Partition(labels=labels, mode="one-shot", n_base=len(Z), n_increment=0,
                         base_seconds=seconds, incremental_seconds=0.0)

    def partition(self, Z: np.ndarray, n_base: int,
                  base_result: tuple[np.ndarray, float] | None = None) -> Partition:
        """Both stages on standardised records ``Z`` in arrival order, unmeasured.

        ``base_result`` (labels, seconds) reuses a base run already made on ``Z[:n_base]``.
        """
        Z = np.ascontiguousarray(Z, dtype=np.float64)
        n = Z.shape[0]
        if not 0 <= n_base <= n:
            raise ParameterError(f"n_base must be between 0 and {n}, got {n_base}")
        base, increment = Z[:n_base], Z[n_base:]
        usable = base_is_usable(n_base, self.k, n)
        if usable:
            base_labels, base_seconds = base_result or self.run_base(base)
        else:  # nothing to build on: the stage's fallback runs one-shot on the union
            base_labels, base_seconds = np.zeros(n_base, dtype=np.int64), 0.0
        labels, inc_seconds = self.run_increment(base, base_labels, increment)
        refinement = None
        if usable and n > n_base:
            refinement = self.run_refine(Z, labels, n_base)
            if refinement is not None:
                labels = refinement.labels
        return Partition(labels=labels, mode="two-stage" if usable else "one-shot",
                         n_base=n_base, n_increment=n - n_base, base_seconds=base_seconds,
                         incremental_seconds=inc_seconds, refinement=refinement)

    def run_refine(self, Z: np.ndarray, labels: np.ndarray, n_base: int) -> Refinement | None:
        """The anytime refinement of the union's ``labels``, late records' cells first, in
        the budget left now (None when ``refine`` is off)."""
        budget = window_budget(*refine_window(self.refine, deadline_at=self.refine_until))
        if budget is None:
            return None
        return refine_partition(Z, labels, self.k, budget_seconds=budget,
                                first=np.arange(n_base, Z.shape[0]))

    def run(self, Z: np.ndarray, n_base: int, *, compare_one_shot: bool = False,
            base_result: tuple[np.ndarray, float] | None = None) -> TwoStageResult:
        """Run both stages on standardised records ``Z`` in arrival order (:meth:`partition`)
        and measure the release; ``compare_one_shot`` also runs the one-shot reference."""
        Z = np.ascontiguousarray(Z, dtype=np.float64)
        if compare_one_shot:
            self.warm_up(Z)
        part = self.partition(Z, n_base, base_result)
        result = TwoStageResult(**vars(part), distortion=distortion(Z, part.labels))
        if compare_one_shot:
            one_shot, result.one_shot_seconds = self.run_one_shot(Z)
            result.one_shot_distortion = distortion(Z, one_shot)
        return result


def split_by_ratio(n: int, nu: float) -> int:
    """n_0 for a data ratio nu: the first (1 - nu) of the records form the base snapshot."""
    if not 0 <= nu < 1:
        raise ParameterError(f"nu must be in [0, 1), got {nu}")
    return n - round(nu * n)
