"""The release overhead: the seconds after close that are not compute, step by step.

After close the service drains the topic, loads the records, runs the compute (waiting for the
base run first if it is still running), applies the k-anonymity gate and builds the table,
writes the files and publishes (``close_steps_seconds`` in a release's ``report.json``, keyed
``drain``, ``wait_for_base``, ``load``, ``compute``, ``gate_and_table``, ``files``,
``publish``). The compute and the wait for the base are what the planner's cost models predict
(:mod:`scheduler.cost_model`); every other step is overhead, modelled here as ``a + b n`` per
step for a release of ``n`` records, so that a deadline keeps that much free
(:func:`scheduler.live.compute_budget`).

:data:`DEFAULT_OVERHEAD` is the model until one is fitted from measured close steps
(:meth:`ReleaseOverhead.fit`, :meth:`ReleaseOverhead.from_reports`). Its per-record parts
follow the two-stage releases of :data:`MEASURED_RELEASES` (the default-plan benchmark and the
million-record demo, records keyed without headers: 0.65 s + 3.5 us per record in all, 1.4 s at
200,000 and 4.2 s at 1,000,000); with ``compute_rest``, the compute step less the engines in it
(sending the records to the compute process and the labels back, which a release records beside
its close steps), 0.7 s + 4.5 us. Its late-record parts price the records a base release did
not cover, which loading and the gate handle one by one: about 4.5 us each to load and 5 us
each to gate and table (``simulations/bench_service.py`` at ``--nu 0.05`` and ``--nu 0.5`` and
its one-shot releases, and a million-record release with 998,335 late records: 4.9 s to load,
5.5 s to gate). Without them a plan that leaves almost every record to the incremental stage
looked cheap. A default to be refitted on the machine, not a constant.

Pure: numbers and mappings in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Close steps that are compute, predicted by the cost models, not by the overhead model.
COMPUTE_STEPS = ("wait_for_base", "compute")
#: Close steps whose late-record part grows with the records the late ones span (the members of
#: every cell made or changed at close, which are gated and serialised again), not with the
#: late records alone: a late record that joins a base cell of ten makes eleven records' work.
SPANNED_STEPS = ("gate_and_table",)
#: The close step that is the compute step less the engines in it (sending the records to the
#: compute process and the labels back, standardising): overhead, priced here, not by the cost
#: models. A release records it beside its close steps (``streamanon.service.release_steps``).
COMPUTE_REST = "compute_rest"
#: Close steps whose late-record part a release made whole at a scheduled close does not pay:
#: the service reads the records from the store in the seconds before the close
#: (``streamanon.service.base_run``), and at the close only those stored since.
READ_AHEAD_STEPS = ("load",)


@dataclass(frozen=True)
class StepCost:
    """One close step: ``seconds + per_record * n + per_late_record * late``.

    ``late`` is the number of records the release could not take from a base release made
    before close: the records after the base snapshot, or all ``n`` when the release is made
    whole at close (one-shot, or a release that could not be spliced). Loading and the gate
    grow with them; the files and publishing with ``n``."""

    seconds: float
    per_record: float
    per_late_record: float = 0.0

    def __call__(self, n: float, late: float = 0.0) -> float:
        return (self.seconds + self.per_record * max(float(n), 0.0)
                + self.per_late_record * max(float(late), 0.0))

    @classmethod
    def fit(cls, ns: Iterable[float], seconds: Iterable[float],
            prior: StepCost | None = None,
            lates: Iterable[float] | None = None) -> StepCost:
        """Least squares with every coefficient kept >= 0.

        With ``lates`` that vary apart from the sizes, ``a + b n + c late`` is fitted by
        non-negative least squares. Otherwise, with timings at two or more sizes, ``a + b n``
        is fitted (a negative coefficient is set to 0 and the other refitted alone). At one
        size only the split between the fixed and the per-record part cannot be measured: the
        fixed part is the ``prior``'s (at most the measured mean), the rest is per record.
        """
        n = np.asarray(list(ns), dtype=float)
        t = np.asarray(list(seconds), dtype=float)
        if n.size == 0:
            raise ValueError("need at least one timing to fit a close step")
        late = None if lates is None else np.asarray(list(lates), dtype=float)
        if late is not None and late.size == n.size:
            design = np.column_stack([np.ones_like(n), n, late])
            design = design / np.maximum(np.abs(design).max(axis=0), 1.0)
            if np.linalg.matrix_rank(design) == 3:
                from scipy.optimize import nnls

                coef, _ = nnls(design, t)
                scale = np.maximum(np.abs(np.column_stack([np.ones_like(n), n, late]))
                                   .max(axis=0), 1.0)
                a, b, c = coef / scale
                return cls(float(a), float(b), float(c))
        if np.ptp(n) > 0:
            b, a = np.polyfit(n, t, 1)
            if b < 0:
                a, b = t.mean(), 0.0
            elif a < 0:
                a, b = 0.0, float(n @ t / (n @ n))
            return cls(float(a), float(b))
        mean = float(t.mean())
        a = min(prior.seconds if prior is not None else 0.0, mean)
        return cls(a, (mean - a) / n[0] if n[0] > 0 else 0.0)


@dataclass(frozen=True)
class ReleaseOverhead:
    """Seconds after close that are not compute: the sum of the ``steps``' ``a + b n``.

    ``runs`` is how many releases' measured close steps the model was fitted on (0: the
    default).
    """

    steps: dict[str, StepCost] = field(default_factory=dict)
    runs: int = 0

    def __call__(self, n: float, late: float = 0.0, spanned: float | None = None) -> float:
        """Seconds for a release of ``n`` records, ``late`` of which were not in a base
        release made before close (:class:`StepCost`), and ``spanned`` in cells made or
        changed at close (:data:`SPANNED_STEPS`; default ``late``)."""
        return sum(self.step(name, n, late, spanned) for name in self.steps)

    def late_part(self, late: float, read_ahead: bool = False,
                  spanned: float | None = None) -> float:
        """The seconds that ``late`` records add to a release (the planner weighs them),
        ``spanned`` records in the cells made or changed at close (default ``late``); with
        ``read_ahead``, those of a release made whole at a scheduled close, whose records
        were read ahead of it (no :data:`READ_AHEAD_STEPS`)."""
        return sum(step.per_late_record * max(_late_of(name, late, spanned), 0.0)
                   for name, step in self.steps.items()
                   if not (read_ahead and name in READ_AHEAD_STEPS))

    def step(self, name: str, n: float, late: float = 0.0,
             spanned: float | None = None) -> float:
        """Seconds of one step for ``n`` records (0 for a step the model does not have)."""
        return self.steps[name](n, _late_of(name, late, spanned)) if name in self.steps else 0.0

    @classmethod
    def fit(cls, timings: Iterable[tuple[float, Mapping[str, float]]
                                   | tuple[float, float, Mapping[str, float]]],
            prior: ReleaseOverhead | None = None) -> ReleaseOverhead:
        """The overhead fitted on measured releases, each ``(n, close_steps_seconds)`` or
        ``(n, late, close_steps_seconds)`` (``late``: :class:`StepCost`).

        Every step that is not compute (:data:`COMPUTE_STEPS`) is fitted on its own
        (:meth:`StepCost.fit`); a step missing from a release's timings did not run in it and
        counts 0 s there, so a step the close path no longer has fits to nothing and a new one
        is counted. ``prior`` (default :data:`DEFAULT_OVERHEAD`) gives the fixed part of a
        step timed at one size only. No timings: the prior itself.
        """
        prior = DEFAULT_OVERHEAD if prior is None else prior
        runs = [(float(t[0]), None if len(t) == 2 else float(t[1]), dict(t[-1]))
                for t in timings]
        if not runs:
            return prior
        names = sorted({name for *_, steps in runs for name in steps} - set(COMPUTE_STEPS))
        ns = [n for n, _, _ in runs]
        lates = None if any(late is None for _, late, _ in runs) else [
            late for _, late, _ in runs]
        return cls({name: StepCost.fit(ns, [steps.get(name, 0.0) for *_, steps in runs],
                                       prior.steps.get(name), lates)
                    for name in names}, runs=len(runs))

    @classmethod
    def from_reports(cls, reports: Iterable[Mapping[str, Any]],
                     prior: ReleaseOverhead | None = None) -> ReleaseOverhead:
        """:meth:`fit` on releases' ``report.json`` documents: ``n`` and
        ``close_steps_seconds`` (at the top level, where the service writes it, or under
        ``published``). Reports of unpublished releases, without close steps, are skipped.
        The late records are ``n_increment`` of a spliced release, else all ``n``."""
        timings: list[tuple[float, float, Mapping[str, float]]] = []
        for report in reports:
            steps = report.get("close_steps_seconds") or (
                report.get("published") or {}).get("close_steps_seconds")
            if steps:
                n = float(report["n"])
                late = float(report.get("n_increment") or 0) if report.get("spliced") else n
                timings.append((n, late, steps))
        return cls.fit(timings, prior)

    def follow(self, releases: Iterable[tuple[float, float, Mapping[str, float]]
                                        | tuple[float, float, Mapping[str, float], float]]
               ) -> ReleaseOverhead:
        """This model scaled step by step to measured ``releases`` of ``(n, late,
        close_steps_seconds)`` or ``(n, late, close_steps_seconds, spanned)`` (the records in
        cells made or changed at close; default ``late``): each step's coefficients times the
        geometric mean of its measured / predicted seconds over the releases that ran it.
        Unlike :meth:`fit`, one
        release is enough, and the split between the fixed, per-record and per-late-record
        parts stays the model's; what changes is how fast this machine runs each step (the
        default's steps were measured on another machine: on this project's own, a
        200,000-record release took 0.84 s of steps where the default predicted 1.46 s).
        No release: the model itself."""
        releases = [(n, late, spanned, steps_of) for n, late, steps_of, spanned
                    in (_with_span(r) for r in releases)]
        steps = {}
        for name, cost in self.steps.items():
            ratios = [steps_of[name] / self.step(name, n, late, spanned)
                      for n, late, spanned, steps_of in releases
                      if steps_of.get(name, 0.0) > 0 and self.step(name, n, late, spanned) > 0]
            scale = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else 1.0
            steps[name] = StepCost(cost.seconds * scale, cost.per_record * scale,
                                   cost.per_late_record * scale)
        return ReleaseOverhead(steps, runs=self.runs + len(releases))

    def to_dict(self) -> dict[str, Any]:
        """As JSON: ``{"steps": {name: [seconds, per_record, per_late_record]}, "runs":
        runs}``."""
        return {"steps": {name: [s.seconds, s.per_record, s.per_late_record]
                          for name, s in self.steps.items()}, "runs": self.runs}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReleaseOverhead:
        """A model from :meth:`to_dict` (a step of two numbers has no late-record part)."""
        return cls({name: StepCost(*(float(x) for x in values)) for name, values in
                    data["steps"].items()}, runs=int(data.get("runs", 0)))


def spanned_records(cost: Any, n_base: float, n_increment: float) -> float:
    """The records ``n_increment`` late records span after a base of ``n_base``: what the
    stage's cost model says (:meth:`scheduler.cost_model.NearestNeighbourCost.spanned`), or
    the increment for one that does not (every late record in a cell of its own)."""
    spanned = getattr(cost, "spanned", None)
    return float(spanned(n_base, n_increment)) if spanned is not None else max(
        float(n_increment), 0.0)


def _late_of(name: str, late: float, spanned: float | None) -> float:
    """The late-record count step ``name`` grows with: ``spanned`` for
    :data:`SPANNED_STEPS` (when given), else ``late``."""
    return spanned if spanned is not None and name in SPANNED_STEPS else late


def _with_span(release: tuple[Any, ...]) -> tuple[float, float, Mapping[str, float],
                                                  float | None]:
    """A recorded release as ``(n, late, steps, spanned)``; one recorded without the
    records spanned (three items) spans its late records."""
    n, late, steps, *rest = release
    return float(n), float(late), steps, (float(rest[0]) if rest and rest[0] is not None
                                          else None)


#: Releases whose close steps :data:`DEFAULT_OVERHEAD` follows: (records, late records, the
#: close steps other than compute, in seconds), each one run on a quiet 2-core machine
#: (docs/benchmarks/default-plan.md): MDAV at 200,000 with back-loaded arrivals
#: (2026-11-28, 2cc479f), ONA* at 200,000 and MDAV at 1,000,000 with uniform arrivals
#: (fe601b2), and the million-record demo twice (b875ebe, 65c1d07).
MEASURED_RELEASES: tuple[tuple[int, int, dict[str, float]], ...] = (
    (200_000, 12_286, {"drain": 0.584, "load": 0.055, "gate_and_table": 0.357, "files": 0.099,
                       "publish": 0.538}),
    (200_000, 20_229, {"drain": 0.27, "load": 0.16, "gate_and_table": 0.90, "files": 0.15,
                       "publish": 0.75}),
    (1_000_000, 87_312, {"load": 0.52, "gate_and_table": 1.02, "files": 0.72, "publish": 2.17}),
    (1_000_000, 85_908, {"drain": 0.12, "load": 0.58, "gate_and_table": 0.75, "files": 0.70,
                         "publish": 2.80}),
    (1_000_000, 87_000, {"drain": 0.16, "load": 0.62, "gate_and_table": 1.57, "files": 0.60,
                         "publish": 2.18}),
)

#: The overhead before any fit: 0.7 s + 4.5 us per record in all, and 9.5 us per late record
#: (see the module docstring). ``compute_rest`` is the compute step less the engines in it
#: (the records sent to the compute process and the labels back, the standardisation: 0.29 s
#: of a 6.2 s one-shot compute step at 200,000 x 15 on two cores, 2026-12-08), which a release
#: records beside its close steps (:data:`COMPUTE_REST`).
DEFAULT_OVERHEAD = ReleaseOverhead({
    COMPUTE_REST: StepCost(0.05, 1.0e-6),
    "drain": StepCost(0.1, 0.1e-6),
    "load": StepCost(0.05, 0.15e-6, 4.5e-6),
    "gate_and_table": StepCost(0.3, 0.4e-6, 5.0e-6),
    "files": StepCost(0.0, 0.68e-6),
    "publish": StepCost(0.2, 2.2e-6),
})
