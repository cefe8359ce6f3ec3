"""A survey's one release: computed at close, its files written, then published (design spec §6).

:meth:`Releaser.write` computes the release once, with :func:`streamanon.release.release_partition`
(the checkpointed base cells plus the incremental stage, or one engine run on everything when
there is no usable base or when the deadline leaves time for it), applies the k-anonymity gate,
writes the files and notes the release as written: from then on it is the survey's release.
It reads as its steps: load, decide (the decision at close is a value the scheduler makes,
:func:`scheduler.at_close.decide_at_close`), compute, gate and table, files, report; a private
release has its own writer (:mod:`.private_release`), which uses the same public steps.
:meth:`Releaser.publish` sends the written file to the release topic, record by record, then
its manifest, until it is through. A release written before (a restart, a failed publish) is
published again from its files as written, never computed again (:meth:`Releaser.release`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from scheduler.at_close import AutoStage, decide_at_close
from scheduler.cost_model import CostModelStore, PowerLaw
from scheduler.overhead import DEFAULT_OVERHEAD, READ_AHEAD_STEPS, ReleaseOverhead
from streamanon.errors import PublishError, describe_error, withheld
from streamanon.incremental import base_is_usable
from streamanon.incremental.run import TwoStageRun
from streamanon.metrics import Standardisation
from streamanon.mixed import encoding_for
from streamanon.release import (
    BaseSnapshot,
    Prepared,
    Privacy,
    Release,
    any_missing,
    prepare_stored,
    qi_values,
    release_partition,
    release_prepared,
)
from streamanon.service.broker import ensure_topics
from streamanon.service.config import Config, SurveyConfig
from streamanon.service.engine_traits import auto_stage_names, engine_traits
from streamanon.service.kafka_clients import KafkaSettings
from streamanon.service.kept import forget, kept_release_partition
from streamanon.service.offsets import broker_errors
from streamanon.service.planning import plan_request
from streamanon.service.private_release import write_private
from streamanon.service.publisher import (
    FileModes,
    read_written_release,
    record_messages,
    records_frame,
    release_is_complete,
    release_manifest,
    release_risk,
    risk_page_path,
    survey_privacy,
    write_release_files,
    write_release_formats,
    write_report,
    write_risk_page,
)
from streamanon.service.release_steps import (
    Computed,
    Computing,
    Loaded,
    Made,
    Planned,
    engine_at_close,
    release_report,
    steps_to_keep,
)
from streamanon.service.reports import Publication, ReleaseReport
from streamanon.service.runtime import RunningSurvey, StoreCall
from streamanon.service.states import RELEASED
from streamanon.service.store import Records, ReleaseRow, Store, StoreError
from streamanon.service.telemetry import Telemetry
from streamanon.splicing import BaseRelease, prepare_base, splice

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Fresh:
    """A release as :meth:`Releaser.write` made it, for its publish: the stored records
    ``frame`` (arrival order), the shuffled release ``table``, its ``messages`` (one per row,
    in row order) and ``order`` (row i is record ``order[i]``)."""

    frame: pd.DataFrame
    table: pd.DataFrame
    messages: list[bytes]
    order: np.ndarray


def fresh_release(frame: pd.DataFrame, prepared: Prepared, labels: np.ndarray, k: int,
                  seed: int, privacy: Privacy | None) -> tuple[Release, list[bytes], np.ndarray]:
    """The release of ``frame`` made whole at close: the table (the gate included), shuffled
    by ``seed``, its messages and its order (row i is record ``order[i]``)."""
    release = release_prepared(frame, prepared, labels, k, seed=None, privacy=privacy,
                               shuffle=False)
    order = np.random.default_rng(seed).permutation(len(frame))
    table = release.table.iloc[order].reset_index(drop=True)
    messages = record_messages(table, prepared.encoding.names, labels[order])
    return replace(release, table=table), messages, order


async def stored_records(survey: RunningSurvey, upto_seq: int | None = None, *, store: Store,
                         in_store: StoreCall) -> tuple[Records, int]:
    """The stored records of ``survey``'s survey with ``seq <= upto_seq`` (a base snapshot's) or,
    with None, every one (a release made whole at close): those read ahead (taken from ``survey``,
    :func:`.base_run.read_ahead`: a read in progress keeps nothing more), then the rest from
    the store; and how many had been read ahead. Stored records never change while the
    survey is open, so this is what one read at that moment gives. The parts are joined in a
    thread."""
    sid = survey.config.id
    m = len(survey.config.quasi_identifiers)
    parts, cut = survey.read_ahead.take()
    if not parts:
        return await in_store(lambda: store.load_records(sid, m, upto_seq=upto_seq)), 0
    if upto_seq is not None and cut > upto_seq:  # read past the snapshot: its first records
        parts = [part.upto(upto_seq) for part in parts]
    ahead = sum(len(part) for part in parts)
    if upto_seq is None or cut <= upto_seq:
        parts.append(await in_store(lambda: store.load_records(
            sid, m, after_seq=cut, upto_seq=upto_seq)))
    return await asyncio.to_thread(Records.join, parts), ahead


def release_run(survey: SurveyConfig, refine_until: float | None = None, *, engine: str,
                stage: str) -> TwoStageRun:
    """The survey's base ``engine`` and incremental ``stage`` (those it runs:
    :attr:`~.survey.Survey.engine` and :attr:`~.survey.Survey.stage`, its configured ones or
    those its ``auto`` settings settled on) with their parameters and refinement (ended by
    ``refine_until`` on the :func:`time.time` clock, when given); its methods run in the
    compute process. A stage still ``"auto"`` (a base run, or a release the close decided
    one-shot, runs no stage) takes the first candidate's place."""
    stage = auto_stage_names()[0] if stage == "auto" else stage
    return TwoStageRun(survey.k, engine, stage,
                       engine_params=survey.engine_params,
                       incremental_params=survey.incremental_params,
                       refine=survey.refine, refine_until=refine_until)


class Releaser:
    """Computes, writes and publishes the surveys' releases.

    Store calls go through ``in_store`` (the service's one store thread), other blocking work
    through :meth:`in_thread`, the engines run in ``compute_pool``, and the release topic is
    written with ``producer`` (aiokafka)."""

    def __init__(self, config: Config, store: Store, in_store: StoreCall,
                 compute_pool: Executor, producer: Any, telemetry: Telemetry) -> None:
        self.config = config
        self.store = store
        self.in_store = in_store
        self.compute_pool = compute_pool
        self.producer = producer
        self.telemetry = telemetry
        self.modes = FileModes(config.output.file_mode, config.output.directory_mode)
        self.cost_models = CostModelStore(config.planner.cost_models)

    async def release(self, survey: RunningSurvey, base_model: PowerLaw,
                      stages: Mapping[str, Any] | None = None) -> None:
        """Publish the survey's one release: compute it and write its files, unless a release
        was written before (a restart, a failed publish), which is published again from its
        files as written, never computed again. ``base_model`` is the survey's base cost model;
        ``stages`` the candidate stages' cost models of ``incremental = "auto"``."""
        sid = survey.config.id
        row = await self.in_store(self.store.load_release, sid)
        if row is not None and row.status == "published":
            if (await self.in_store(self.store.survey_state, sid)).state != RELEASED:
                await survey.move(RELEASED, "already published")
            survey.released()
            return
        resumed = row is not None
        fresh = None
        if row is None:
            row, fresh = await self.write(survey, base_model, stages)
            survey.base_release_used()  # its records are in ``fresh`` now
        else:
            log.info("survey %s: release %s was written before; publishing its files again",
                     sid, row.release_id)
        await self.publish(survey, row, resumed, fresh)

    async def write(self, survey: RunningSurvey, base_model: PowerLaw,
                    stages: Mapping[Any, Any] | None = None) -> tuple[ReleaseRow, Fresh]:
        """Compute the release, apply the k-anonymity gate, write its Parquet file, and note
        it as written: from then on it is the survey's release, whatever happens.

        The steps, each timed as a close step: :meth:`load` the records, :meth:`decide` how
        the release is made (:func:`scheduler.at_close.decide_at_close`), :meth:`compute` its
        cells, :meth:`gate_and_table`, :meth:`write_files`; then its report
        (:func:`.release_steps.release_report`) is noted with it (:meth:`save_written`). A
        private release (:attr:`~.private_settings.PrivateSettings.private`) is drawn by its
        own writer after the load (:func:`.private_release.write_private`).

        With the base release made before close (:meth:`prepare_base`) only the records after
        the base snapshot are read from the store, and the messages of the base cells the
        incremental stage left as they were are reused (:func:`streamanon.splicing.splice`);
        the compute process gets only those records when it kept the snapshot's values from
        the base run (:mod:`streamanon.service.kept`)."""
        loaded = await self.load(survey)
        if survey.config.private:  # one sort and one draw: no base run, no stage
            row, table, messages, order = await write_private(self, survey, loaded.frame,
                                                              loaded.ahead)
            return row, Fresh(loaded.frame, table, messages, order)
        planned = await self.decide(survey, loaded, base_model, stages)
        computed = await self.compute(survey, loaded, planned)
        made = await self.gate_and_table(survey, loaded, computed)
        log.info("survey %s: writing the files of release %s (%s)", survey.config.id,
                 made.release_id, "spliced into the base release made before close"
                 if made.spliced else "made at close")
        files = await self.write_files(survey, made.release.table)
        report = release_report(survey, loaded, planned, computed, made, files, base_model)
        row = await self.save_written(survey, report, made.seed)
        return row, Fresh(loaded.frame, made.release.table, made.messages, made.order)

    async def load(self, survey: RunningSurvey) -> Loaded:
        """The load step: the survey's stored records, with the base run's checkpoint. With
        the base release made before close from that checkpoint's snapshot, only the records
        after it are read; else those read ahead of the close and the rest
        (:func:`stored_records`). Records read ahead of a base run the release does not use
        are dropped. Under k records: :class:`StoreError`, no release exists."""
        sc = survey.config
        sid = sc.id
        m = len(sc.quasi_identifiers)
        step = time.perf_counter()
        cp = await self.in_store(self.store.load_checkpoint, sid)
        held = survey.base_release
        if held is not None and (cp is None or held[0] != cp.snapshot_seq):
            held = None  # made from another snapshot: not this release's base
        ahead = 0
        if held is not None:
            late = await self.in_store(
                lambda: self.store.load_records(sid, m, after_seq=held[0]))
            frame = held[1].frame if not len(late) else await self.in_thread(  # an empty
                lambda: pd.concat([held[1].frame, records_frame(late, sc)],  # frame's dtypes
                                  ignore_index=True))  # would change the base's JSON kinds
        else:
            records, ahead = await stored_records(survey, store=self.store, in_store=self.in_store)
            if ahead:
                log.info("survey %s: %d of the %d records read ahead of the close", sid, ahead,
                         len(records))
            frame = await self.in_thread(records_frame, records, sc)
        survey.read_ahead.drop()  # read ahead of a base run the release does not use
        survey.record("load", time.perf_counter() - step)
        if len(frame) < sc.k:
            raise StoreError(f"{len(frame)} valid records: no {sc.k}-anonymous release exists")
        return Loaded(frame, cp, held, ahead)

    async def decide(self, survey: RunningSurvey, loaded: Loaded, base_model: PowerLaw,
                     stages: Mapping[Any, Any] | None) -> Planned:
        """How the release is made at close (:func:`scheduler.at_close.decide_at_close`), for
        the records loaded, the base run's checkpoint, the survey's deadline and close time,
        ``base_model`` and, for ``incremental = "auto"``, the candidate ``stages``' cost models
        with the steps after close as this machine ran them. A stage chosen is settled on the
        survey (:meth:`~.survey.Survey.settle_stage`). The compute's clock starts here."""
        sc = survey.config
        n, cp = len(loaded.frame), loaded.checkpoint
        overhead = await self._overhead(sc.id)
        closed_at = (await self.in_store(self.store.survey_state, sc.id)).close_requested_at
        auto = None
        # the stage for the real counts (scheduler.choice), chosen anew at each attempt
        if sc.incremental == "auto":
            auto = AutoStage(auto_stage_names(), stages or {},
                             engine_traits(survey.engine) if stages else None,
                             plan_request(sc).max_delta, overhead)
        started = time.time()
        decision = decide_at_close(
            n, None if cp is None else cp.n_base,
            base_usable=cp is not None and base_is_usable(cp.n_base, sc.k, n),
            stage=sc.incremental, deadline=sc.deadline, closed_at=closed_at, now=started,
            base_model=base_model, refine=sc.refine != "off", auto=auto)
        base = None
        if decision.two_stage:
            assert cp is not None and decision.stage is not None
            base = BaseSnapshot(cp.n_base, cp.labels, cp.mean, cp.scale, cp.seconds)
            if decision.stage_reason is not None:  # incremental = "auto" chose it now
                survey.settle_stage(decision.stage, decision.stage_reason)
            log.info("survey %s: computing the release: %s on %d records after a base of %d",
                     sc.id, survey.stage, n - cp.n_base, cp.n_base)
        else:
            log.info("survey %s: computing the release: %s on %d records", sc.id,
                     survey.engine, n)
        return Planned(decision, base, closed_at, started, overhead)

    async def compute(self, survey: RunningSurvey, loaded: Loaded, planned: Planned) -> Computed:
        """The compute step: the release's cells as :meth:`decide` said, in the compute process
        (:meth:`_start_compute`), the records prepared beside them; every record is sent
        when the compute process did not keep the base snapshot's values after all."""
        sid, qi = survey.config.id, survey.config.quasi_identifiers
        n, base, started = len(loaded.frame), planned.base, planned.started
        run = release_run(survey.config, planned.decision.refine_until, engine=survey.engine,
                          stage=survey.stage)
        computing = await self._start_compute(survey, loaded, base, run)
        partition = await computing.partition
        if computing.kept and partition is not None:
            assert base is not None and computing.prepared_at is not None
            log.info("survey %s: %d records after the base snapshot sent to the compute "
                     "process, the snapshot's %d kept there since the base run; the partition "
                     "back after %.2f s (its stage %.2f s), the records prepared beside it "
                     "after %.2f s", sid, n - base.n_base, base.n_base,
                     time.time() - started, partition.incremental_seconds,
                     computing.prepared_at - started)
        if partition is None:  # the compute process did not keep the base values: send all
            log.info("survey %s: the base snapshot's values were not kept in the compute "
                     "process; sending all %d records", sid, n)
            partition = await asyncio.get_running_loop().run_in_executor(
                self.compute_pool, release_partition, run,
                await self.in_thread(qi_values, loaded.frame, qi), base, None)
        done = time.time()
        if partition.refinement is not None:
            r = partition.refinement
            log.info("survey %s: refinement: %d moves, %d dissolves, %d splits in %d rounds, "
                     "%.2f s (%s)", sid, r.moves, r.dissolves, r.splits, r.rounds, r.seconds,
                     r.stopped)
        survey.record("compute", done - started)
        prepared = computing.prepared
        if prepared is not None and prepared.groups is None:  # one partition, one run
            survey.record("compute_engine", engine_at_close(partition))
            if partition.mode == "one-shot":  # the engine on every record: a sample of its
                # cost, at the records it ran on (repeated keys collapsed: engine_rows)
                from streamanon.engines.distinct import engine_rows

                work = await self.in_thread(engine_rows, prepared.Z, survey.config.k,
                                            prepared.embedded_tuples())
                survey.record("one_shot_engine", partition.base_seconds)
                survey.record("one_shot_work", work)
        return Computed(partition, computing.own, computing.prepared, done)

    async def _start_compute(self, survey: RunningSurvey, loaded: Loaded,
                             base: BaseSnapshot | None, run: TwoStageRun) -> Computing:
        """Send the partition to the compute process (not awaited) and prepare the records
        for the table: beside it for plain numbers, before it otherwise (it needs them)."""
        sc = survey.config
        sid, qi, frame, cp = sc.id, sc.quasi_identifiers, loaded.frame, loaded.checkpoint
        # numbers only, none missing, no strata: the plain numeric partition, from the values
        # alone; the preparation (for the release and its loss) then runs beside it
        plain_numeric = (encoding_for(frame, sc.schema).numeric_only and not sc.schema.strata
                         and not any_missing(frame, qi))
        loop = asyncio.get_running_loop()
        kept = (plain_numeric and base is not None and cp is not None
                and self.config.compute.cluster == "local")  # a cluster's base keeps nothing
        # the values sent to the compute process: the late records' only when it keeps the
        # base snapshot's
        X = (qi_values(frame, qi, start=base.n_base) if kept
             else await self.in_thread(qi_values, frame, qi))
        if not kept:  # what the compute process may keep of the base run is not needed
            self.compute_pool.submit(forget, sid)  # queued before the compute: not awaited
        if plain_numeric:
            if kept:  # the base snapshot's values are kept there: only the rest is sent
                computing = loop.run_in_executor(
                    self.compute_pool, kept_release_partition, sid, cp.snapshot_seq, qi, run,
                    X, base)
            else:
                computing = loop.run_in_executor(self.compute_pool, release_partition, run, X,
                                                 base, None)
            own = await self.in_thread(prepare_stored, frame, sc.schema, sc.k)
            return Computing(computing, own, own, kept, prepared_at=time.time())
        own = await self.in_thread(prepare_stored, frame, sc.schema, sc.k)
        prepared = own if base is None else await self.in_thread(
            prepare_stored, frame, sc.schema, sc.k, Standardisation(base.mean, base.scale))
        return Computing(loop.run_in_executor(self.compute_pool, release_partition, run, X,
                                              base, prepared), own, prepared, kept)

    async def gate_and_table(self, survey: RunningSurvey, loaded: Loaded,
                             computed: Computed) -> Made:
        """The gate and table step: the cells merged until l and t hold (sensitive fields),
        then the table with the k-anonymity gate and its messages, spliced into the base
        release made before close where it can be, else made whole; its id and seed."""
        sc = survey.config
        frame, held, own, partition = loaded.frame, loaded.held, computed.own, computed.partition
        step = time.perf_counter()
        seed = secrets.randbits(62)
        release_id = uuid.uuid4().hex
        privacy = survey_privacy(frame, sc)
        labels = partition.labels if privacy is None else await self.in_thread(
            privacy.enforce, computed.prepared.Z, partition.labels)  # cells merged until l, t hold
        spliced = (held is not None and privacy is None and partition.mode == "two-stage"
                   and own.groups is None and held[1].n_base == partition.n_base
                   and not np.isnan(own.C).any())
        if spliced:  # the gate is in both
            release, messages, order = await self.in_thread(
                splice, held[1], frame, own, labels, sc.k, seed)
        else:
            release, messages, order = await self.in_thread(
                fresh_release, frame, own, labels, sc.k, seed, privacy)
        survey.record("gate_and_table", time.perf_counter() - step)
        return Made(release, messages, order, release_id, seed, privacy, spliced)

    async def write_files(self, survey: RunningSurvey, table: pd.DataFrame) -> dict[str, str]:
        """The files step: the release ``table``'s files in ``[output] directory`` (its
        Parquet file; the other formats once it is out), and the path ``report.html`` will
        have (``html``, written once the release is out: :meth:`publish`)."""
        sc = survey.config
        step = time.perf_counter()
        files = await self.in_thread(lambda: write_release_files(
            table, self.config.output.directory, sc.id, self.config.output.formats,
            schema=sc.schema, later=True, modes=self.modes,
            reports=self.config.output.reports))
        survey.record("files", time.perf_counter() - step)
        files["html"] = risk_page_path(files)  # written once the release is out (publish)
        return files

    async def save_written(self, survey: RunningSurvey, report: ReleaseReport,
                           seed: int) -> ReleaseRow:
        """Note the release of ``report`` (drawn with ``seed``) as written: from now on it is
        the survey's release, published from its files after a restart."""
        row = ReleaseRow(report.release_id, "written", seed, report.to_json())
        await self.in_store(self.store.save_release, survey.config.id, row)
        return row

    async def publish(self, survey: RunningSurvey, row: ReleaseRow, resumed: bool,
                      fresh: Fresh | None = None) -> None:
        """Send the release to the release topic, record by record in its row order, then the
        manifest; on a broker fault send it all again (the manifest marks the complete run),
        until it is through. ``fresh``: the release as :meth:`write` made it, whose messages
        are those of its file; without it (a restart) the written file is read and checked.
        Once it is out: the CSV, SPSS and Stata files, the risk measures, report.json and
        report.html."""
        sid = survey.config.id
        report = ReleaseReport.from_json(row.report)
        if fresh is None:
            table = await self.in_thread(read_written_release, report.files)
            messages = await self.in_thread(record_messages, table)
        else:
            table, messages = fresh.table, fresh.messages
        manifest = release_manifest(report)
        topic = self.config.topic(sid, "release")
        log.info("survey %s: publishing release %s: %d records, then its manifest", sid,
                 row.release_id, len(messages))
        step = time.perf_counter()
        failures = 0
        while True:
            try:
                if not (resumed and await release_is_complete(self.config, topic,
                                                              row.release_id, len(messages))):
                    await asyncio.to_thread(self._ensure_topic, topic)
                    await asyncio.to_thread(self.producer.publish, topic, messages, manifest)
                    # acknowledged is not enough: a broker that lost its topics acknowledged
                    # a whole release and kept none of it
                    if not await release_is_complete(self.config, topic, row.release_id,
                                                     len(messages)):
                        raise PublishError(f"the release topic does not end in release "
                                           f"{row.release_id}'s manifest and its "
                                           f"{len(messages)} records after the publish")
                break
            except broker_errors() as exc:
                failures += 1
                self.telemetry.count_publish_failure(sid)
                delay = min(2.0 ** failures, 60.0)
                log.warning("survey %s: publishing release %s failed (%s); sending it again "
                            "in %.0f s", sid, row.release_id, describe_error(exc), delay)
                await self.in_store(self.store.set_error, sid,
                                     f"publishing failed ({describe_error(exc)}); retrying")
                resumed = True
                await asyncio.sleep(delay)
        survey.record("publish", time.perf_counter() - step)
        released_at = time.time()
        del messages
        report = await self._after_publish(survey, report, table, fresh)
        published = Publication(
            released_at=released_at,
            close_to_release_seconds=released_at - (report.closed_at or released_at),
            close_steps_seconds={key: round(survey.timings[key], 3) for key in (
                "drain", "wait_for_base", "load", "compute", "gate_and_table", "files",
                "publish") if key in survey.timings})
        report = report.published(published)
        await self.in_thread(write_report, report, self.modes)
        await self.in_store(self.store.save_release, sid,
                             ReleaseRow(row.release_id, "published", row.seed, report.to_json()))
        await survey.move(RELEASED, f"{report.n} records published")
        if failures:
            await self.in_store(self.store.set_error, sid, None)
        survey.record("released_at", released_at)
        self.telemetry.observe_release(sid, report, survey.timings["publish"])
        log.info("survey %s: released %d records (%s), %.2f s after close", sid, report.n,
                 report.mode, published.close_to_release_seconds)
        await self._record_steps(survey, report, published.close_steps_seconds)  # for plans
        survey.released()

    async def _overhead(self, sid: str) -> ReleaseOverhead:
        """The steps after close as this machine ran them (the recorded releases' close steps,
        ``CostModelStore.release_overhead``), read off the event loop; the default when the
        file cannot be read (it only prices the plan's prediction and the stage's choice)."""
        try:
            return await self.in_thread(self.cost_models.release_overhead)
        except Exception as exc:
            log.warning("survey %s: the recorded release steps in %s were not read (%s); the "
                        "default overhead is used", sid, self.cost_models.path,
                        describe_error(exc))
            return DEFAULT_OVERHEAD

    async def _record_steps(self, survey: RunningSurvey, report: ReleaseReport,
                            steps: dict[str, float]) -> None:
        """Keep the release's close steps in the cost-model file, so the next plans weigh the
        steps after close as this machine runs them (``CostModelStore.observe_release``),
        with the compute step's part that is not the engines (:func:`.steps_to_keep`); and
        a one-shot release's engine run on all the records as a sample of the engine's cost
        under this machine's conditions, at the records it ran on, as a base run is one
        (without it a service that released one-shot planned its next survey with the
        calibration alone: 2.6 s predicted for MDAV at 200,000 records that ran 3.6 s in the
        release). Both only for a release of one partition (no strata, no missing-value
        groups: a grouped release's engines ran once per group). A file that
        cannot be written is logged; the release is out already."""
        late = report.n_increment if report.spliced else report.n
        if report.read_ahead:  # the load step read only the records stored since: not that
            steps = {name: s for name, s in steps.items() if name not in READ_AHEAD_STEPS}
        steps = steps_to_keep(steps, survey.timings.get("compute_engine"))
        one_shot, work = survey.timings.get("one_shot_engine"), survey.timings.get("one_shot_work")
        sc = survey.config
        if one_shot and work is not None and work >= 2 * sc.k:  # else the engine hardly ran
            from streamanon.engines import model_parameters

            try:
                await self.in_thread(self.cost_models.observe, report.engine,
                                     len(sc.quasi_identifiers), sc.k, int(work), one_shot,
                                     model_parameters(report.engine, sc.engine_params))
            except Exception as exc:  # advice for later plans; the close steps still go in
                log.warning("survey %s: the one-shot run was not kept in %s (%s)",
                            report.survey, self.cost_models.path, describe_error(exc))
        try:
            await self.in_thread(self.cost_models.observe_release, report.n, late, steps,
                                  report.n_spanned)
        except Exception as exc:  # the release is out; the file is advice for later plans
            log.warning("survey %s: the release's close steps were not kept in %s (%s)",
                        report.survey, self.cost_models.path, describe_error(exc))

    def _ensure_topic(self, topic: str) -> None:
        """The release topic exists (one partition, the configured settings), created when it
        is missing: a broker replaced since start has none. Refused creation is a broker
        error, retried like a failed publish."""
        cfg = self.config
        ensure_topics(KafkaSettings.from_config(cfg), {topic: 1}, configs=cfg.topic_configs(),
                      replicas=cfg.topic_replicas())

    async def _after_publish(self, survey: RunningSurvey, report: ReleaseReport,
                             table: pd.DataFrame, fresh: Fresh | None) -> ReleaseReport:
        """What is not on the close-to-release path, done once the records are out: the files
        of ``[output] formats`` besides Parquet (those not written before a restart), the risk
        measures and ``report.html``. A
        failure of the measures or the page is logged and leaves the release as it is."""
        sc = survey.config
        step = time.perf_counter()
        files = report.files
        files = await self.in_thread(write_release_formats, table, files, sc.schema,
                                      self.modes)
        report = replace(report, files=files)
        try:
            frame = fresh.frame if fresh is not None else records_frame(
                await self.in_store(lambda: self.store.load_records(
                    sc.id, len(sc.quasi_identifiers))), sc)
            risk = report.risk or await self.in_thread(
                release_risk, frame, table, sc, None if fresh is None else fresh.order,
                report.engine, self.config.output.attacks)
            report = replace(report, risk=risk)
            await self.in_thread(write_risk_page, risk, frame, table, sc, files, self.modes,
                                 report.engine)
        except Exception as exc:
            log.error("survey %s: the risk measures or report.html were not made (%s)", sc.id,
                      describe_error(exc), exc_info=withheld(exc))
        survey.record("after_publish", time.perf_counter() - step)
        return report

    async def prepare_base(self, survey: RunningSurvey, frame: pd.DataFrame, labels: np.ndarray,
                           prepared: Prepared) -> BaseRelease | None:
        """The base records' release messages, made right after the base run while the survey
        is open (:func:`streamanon.splicing.prepare_base`), for the survey to keep for the
        close; None where there is none.
        ``prepared`` is the base run's own input (``prepare_stored`` of ``frame``). Only where
        the close can splice them (no sensitive fields, complete data, no strata); a failure is
        logged: the release is then made whole at close."""
        sc = survey.config
        if sc.schema.sensitive or sc.schema.strata:
            return None
        step = time.perf_counter()
        if prepared.groups is not None or np.isnan(prepared.C).any():
            return None
        try:
            base = await self.in_thread(prepare_base, frame, prepared, labels, sc.k)
        except Exception as exc:
            log.error("survey %s: the base release was not prepared (%s); the release will "
                      "be made whole at close", sc.id, describe_error(exc),
                      exc_info=withheld(exc))
            return None
        log.info("survey %s: base release of %d records prepared in %.2f s", sc.id,
                 base.n_base, time.perf_counter() - step)
        return base

    @staticmethod
    async def in_thread(fn: Any, *args: Any) -> Any:
        """``fn(*args)`` in a worker thread, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)
