"""What the steps of :meth:`.releasing.Releaser.write` hand each other, and the report made
from them.

The release at close is made in steps, each timed as a close step of the report: the load
(:class:`Loaded`), the decision at close (:class:`Planned`: the scheduler's
:class:`~scheduler.at_close.CloseDecision` and what carrying it out needs), the compute
(:class:`Computing` while it runs, then :class:`Computed`), the gate and table (:class:`Made`),
the files; :func:`release_report` is the report written with the release. Plain values: the
steps that make them are the releaser's, which does the I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from scheduler import live
from scheduler.at_close import CloseDecision
from scheduler.cost_model import PowerLaw
from scheduler.overhead import COMPUTE_REST, ReleaseOverhead
from scheduler.planner import Plan
from streamanon.incremental.run import Partition
from streamanon.release import BaseSnapshot, Prepared, Privacy, Release
from streamanon.service.publisher import release_columns
from streamanon.service.reports import ReleaseReport
from streamanon.service.runtime import RunningSurvey
from streamanon.service.store import Checkpoint
from streamanon.splicing import BaseRelease, Messages


@dataclass(frozen=True)
class Loaded:
    """The load step's: the stored records ``frame`` (arrival order), the base run's
    ``checkpoint`` (None: none finished), the base release made before close when it is that
    checkpoint's (``held``: its snapshot seq and :class:`~streamanon.splicing.BaseRelease`),
    and how many records had been read ahead of the close."""

    frame: pd.DataFrame
    checkpoint: Checkpoint | None
    held: tuple[int, BaseRelease] | None
    ahead: int


@dataclass(frozen=True)
class Planned:
    """The decision at close and what carrying it out needs: the base snapshot of a
    two-stage release, the close time as stored, when the compute started (:func:`time.time`)
    and the release steps' overhead model it was decided with."""

    decision: CloseDecision
    base: BaseSnapshot | None
    closed_at: float | None
    started: float
    overhead: ReleaseOverhead


@dataclass(frozen=True)
class Computing:
    """A partition under way in the compute process, and the records prepared for the table
    (``own``, on their own scaling) and as the partition sees them (``prepared``, on the
    base's); ``kept``: the base snapshot's values were kept there (only the later records
    sent); ``prepared_at``: when the records were prepared beside it (plain numbers only)."""

    partition: asyncio.Future
    own: Prepared
    prepared: Prepared
    kept: bool
    prepared_at: float | None = None


@dataclass(frozen=True)
class Computed:
    """The compute step's: the release's cells (:class:`streamanon.release.Partition`), the
    records prepared (as :class:`Computing`'s) and when the compute ended."""

    partition: Partition
    own: Prepared
    prepared: Prepared
    done: float


@dataclass(frozen=True)
class Made:
    """The gate and table step's: the release (its gated table), its messages and order (row
    i is record ``order[i]``), its id and seed, the l and t it enforced (None: none) and
    whether it was spliced into the base release made before close."""

    release: Release
    messages: list[bytes] | Messages
    order: np.ndarray
    release_id: str
    seed: int
    privacy: Privacy | None
    spliced: bool


def release_report(survey: RunningSurvey, loaded: Loaded, planned: Planned, computed: Computed,
                   made: Made, files: dict[str, str], base_model: PowerLaw) -> ReleaseReport:
    """The report of a release made at close, as written with it (the risk measures and the
    publication are added once it is out: :meth:`Releaser.publish`)."""
    sc = survey.config
    n, cp = len(loaded.frame), loaded.checkpoint
    partition, release = computed.partition, made.release
    plan, closed_at, groups = survey.last_plan, planned.closed_at, computed.prepared.groups
    two_stage = partition.mode == "two-stage"
    return ReleaseReport(
        survey=sc.id, release_id=made.release_id, n=n, m=len(sc.quasi_identifiers), k=sc.k,
        quasi_identifiers=list(sc.quasi_identifiers), columns=release_columns(sc),
        engine=survey.engine, incremental=survey.stage if two_stage else None,
        mode=partition.mode, nu=partition.nu, n_base=partition.n_base,
        n_increment=partition.n_increment,
        arrival_coefficient=plan.arrival_coefficient if plan else None,
        planned_nu=plan.nu if plan else None,
        predicted_seconds_after_close=plan.finish_after_close if plan else None,
        one_shot_estimate_seconds=base_model(n),
        base_started_at=cp.started_at if cp is not None and two_stage else None,
        closed_at=closed_at, base_seconds=partition.base_seconds,
        incremental_seconds=partition.incremental_seconds,
        compute_seconds_after_close=computed.done - (closed_at or planned.started),
        distortion=release.distortion, information_loss=release.information_loss,
        rejected=dict(survey.ingest.rejected), files=files,
        information_loss_by_type={
            kind: (None if release.loss.get(kind) is None else 100.0 * release.loss[kind])
            for kind in ("numeric", "ordinal", "nominal")},
        values_withheld=release.loss.get("withheld", 0),
        values_imputed=release.loss.get("imputed", 0),
        strata_merged=[] if groups is None else groups.merged_strata,
        privacy=None if made.privacy is None else {"l": sc.l, "t": sc.t,
                                                   "sensitive": release.privacy},
        risk=None, spliced=made.spliced,  # the risk is measured once the release is out
        engine_choice=survey.engine_choice,
        incremental_choice=survey.chosen.stage_report() if planned.decision.two_stage else None,
        predicted_release_seconds=(plan.finish_after_close + live.release_overhead(
            n, planned.overhead) if plan else None),
        base_steps_seconds=({key: round(value, 3) for key, value in survey.base_steps.items()}
                            if two_stage and survey.base_steps else None),
        base_plan=(base_plan_summary(survey.base_plan)
                   if two_stage and survey.base_steps and survey.base_plan else None),
        read_ahead=loaded.ahead if not two_stage else 0,
        n_spanned=len(made.messages.new) if isinstance(made.messages, Messages) else n)


def base_plan_summary(plan: Plan) -> dict[str, float]:
    """What the report keeps of the plan a base run was started on (``base_plan``)."""
    return {"nu": round(plan.nu, 6), "n_base": plan.n_base,
            "head_start_seconds": round(plan.head_start, 3),
            "base_seconds": round(plan.base_seconds, 3),
            "incremental_seconds": round(plan.incremental_seconds, 3),
            "nu_limit": round(plan.nu_limit, 6), "safety": round(plan.safety, 3)}


def engine_at_close(partition: Partition) -> float:
    """The seconds of a release's compute step that its engines ran: the whole run of a
    one-shot release, the incremental stage of a two-stage one (its base ran before), and the
    refinement after either."""
    ran = partition.base_seconds if partition.mode == "one-shot" else (
        partition.incremental_seconds)
    return ran + partition.refine_seconds


def steps_to_keep(steps: Mapping[str, float], engine_seconds: float | None
                  ) -> dict[str, float]:
    """A release's close ``steps`` as the cost-model file keeps them (never as a report's):
    with :data:`~scheduler.overhead.COMPUTE_REST`, the compute step less ``engine_seconds``
    (:func:`engine_at_close`), when both are known."""
    kept = dict(steps)
    if engine_seconds is not None and "compute" in steps:
        kept[COMPUTE_REST] = round(max(steps["compute"] - engine_seconds, 0.0), 3)
    return kept
