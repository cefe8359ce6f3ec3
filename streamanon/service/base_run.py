"""The base run of a survey while it is open (design spec §5): the snapshot read from the
store, the base engine in the compute process, the checkpoint stored, the base release
prepared for the close to splice (:meth:`.releasing.Releaser.prepare_base`).

Everything but the engine runs in threads, never on the event loop, so ingest and HTTP go on
while a million-record snapshot is read and prepared. Each step's time goes to the survey's
``base_steps`` and from there to the release report (``base_steps_seconds``).

The snapshot's records are read ahead (:func:`read_ahead`): in the seconds before the planned
snapshot (:data:`READ_AHEAD_SECONDS`) the records up to a clean cut are read from the store,
in steps of at most :data:`READ_AHEAD_STEP` sequence numbers, and kept; the base run then reads
only those after the cut (:func:`.releasing.stored_records`). Stored records are never changed or
removed while the survey is open, so the records up to a cut are the same whenever they are
read: the snapshot is the one a single read at its moment gives (a test compares them). At a
million records this takes the read (3-4 s) off the time between the snapshot and the engine.
When the plan has no base run (one-shot at close), the records are read ahead of the close the
same way, and the release takes them with the same reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from streamanon.errors import describe_error, withheld
from streamanon.release import prepare_stored
from streamanon.service.kept import kept_base_partition
from streamanon.service.publisher import records_frame
from streamanon.service.releasing import release_run, stored_records
from streamanon.service.runtime import RunningSurvey, StoreCall
from streamanon.service.states import BASE_DONE, OPEN
from streamanon.service.store import Checkpoint, Store, StoreError

if TYPE_CHECKING:
    from streamanon.service.config import ComputeConfig
    from streamanon.service.planning import SurveyPlanner
    from streamanon.service.releasing import Releaser

log = logging.getLogger(__name__)

#: How long before the planned base snapshot its records start to be read ahead (at least;
#: longer when the planner re-plans less often, so that a re-plan falls within it).
READ_AHEAD_SECONDS = 15.0
#: At most this many sequence numbers per read ahead, so that the store thread (which status,
#: commands and the close share) is never held for long (about 0.5 s at m = 15).
READ_AHEAD_STEP = 150_000


@dataclass
class BaseRunResult:
    """What a base run leaves (:func:`run_base`): each step's time, the engine's time (None
    when it failed), and the base release prepared for the close with its time."""

    steps: dict[str, float] = field(default_factory=dict)
    seconds: float | None = None
    base_release: tuple[int, Any] | None = None  # (snapshot seq, splicing.BaseRelease)
    prepare_seconds: float = 0.0


def read_ahead_seconds(replan_seconds: float) -> float:
    """How long before the planned snapshot the records are read ahead, for a planner that
    re-plans every ``replan_seconds``: :data:`READ_AHEAD_SECONDS`, or two re-plans and a
    second when that is longer."""
    return max(READ_AHEAD_SECONDS, 2 * replan_seconds + 1)


async def read_ahead(survey: RunningSurvey, *, clean_cut: Callable[[], Awaitable[int]],
                     still_open: Callable[[], Awaitable[bool]], store: Store,
                     in_store: StoreCall, once: bool = False,
                     measured: Callable[[float], None] | None = None) -> None:
    """Read the survey's records after those already read ahead (``survey.read_ahead``) up to a
    clean cut (``clean_cut()``: every record with a smaller ``seq`` is stored), in steps of
    :data:`READ_AHEAD_STEP`, and keep them for the base run, or for the release made whole at
    close when the plan has none (:func:`.releasing.stored_records`). Nothing is kept once the
    base run has started (it takes what was read and reads the rest), the close has, or what was
    read has been dropped meanwhile (:meth:`~.runtime.ReadAhead.drop`). One read at a time;
    with ``once``, none once something was read (each clean cut of a shared store locks its
    table). ``measured`` then gets the share of the records read that the base engine would
    run on (:func:`streamanon.engines.distinct.work_share`: with repeated keys, the rare
    tuples' respondents), so that the plan prices the base run as the problem it is before
    the run starts."""
    ahead = survey.read_ahead
    if ahead.task is not None or (once and ahead.parts):
        return
    ahead.task = asyncio.current_task()
    epoch = ahead.epoch

    def current() -> bool:
        return ahead.epoch == epoch and survey.base_task is None and survey.close_task is None

    sid = survey.config.id
    m = len(survey.config.quasi_identifiers)
    try:
        if not (current() and await still_open()):
            return
        cut = await clean_cut()
        while current() and ahead.cut < cut:
            after = ahead.cut
            upto = min(cut, after + READ_AHEAD_STEP)
            more = await in_store(lambda a=after, u=upto: store.load_records(
                sid, m, after_seq=a, upto_seq=u))
            if not current():
                return
            ahead.parts.append(more)
            ahead.cut = upto
        if measured is not None and current() and ahead.parts:
            from streamanon.engines.distinct import work_share

            parts = list(ahead.parts)
            measured(await asyncio.to_thread(
                lambda: work_share(np.concatenate([p.qi for p in parts]), survey.config.k)))
    except Exception as exc:  # costs only the time it would have saved
        ahead.drop()
        log.warning("survey %s: the base snapshot's records were not read ahead (%s); the base "
                    "run reads them", sid, describe_error(exc))
    finally:
        ahead.task = None


async def run_base(survey: RunningSurvey, snapshot_seq: int, started: float, *, store: Store,
                   in_store: StoreCall, pool: Executor, compute: ComputeConfig,
                   planner: SurveyPlanner, releaser: Releaser | None,
                   result: BaseRunResult | None = None) -> BaseRunResult:
    """Run the base engine on the survey's records up to ``snapshot_seq`` and store its
    checkpoint (``BASE_DONE``); return what it left (:class:`BaseRunResult`), filled in as it
    goes into ``result`` when given (so that a cancelled run leaves its steps so far). A failure
    is logged and stored as the survey's error, the survey goes back to ``OPEN`` and the
    release is made one-shot at close."""
    from streamanon.engines.distinct import engine_rows

    sc = survey.config
    sid = sc.id
    # the engine it starts with, whatever a close settles meanwhile (no checkpoint yet)
    engine, stage = survey.engine, survey.stage
    loop = asyncio.get_running_loop()
    result = BaseRunResult() if result is None else result
    steps = result.steps
    try:
        step = time.perf_counter()
        records, ahead = await stored_records(survey, snapshot_seq, store=store, in_store=in_store)
        steps["load"] = time.perf_counter() - step
        step = time.perf_counter()
        frame = await asyncio.to_thread(records_frame, records, sc)
        prepared = await asyncio.to_thread(prepare_stored, frame, sc.schema, sc.k)
        work = await asyncio.to_thread(engine_rows, prepared.Z, sc.k)
        steps["prepare"] = time.perf_counter() - step
        step = time.perf_counter()
        run = release_run(sc, engine=engine, stage=stage)
        if compute.cluster == "local":  # its values kept there
            labels, seconds = await loop.run_in_executor(
                pool, kept_base_partition, sid, snapshot_seq, run, prepared)
        else:  # the compute process cuts the snapshot and is the cluster's client
            from streamanon.cluster import partitioned_base

            labels, seconds = await loop.run_in_executor(
                pool, partitioned_base, run, prepared, compute.cluster,
                compute.part_size, survey.auto_engine and not sc.engine_params)
        steps["engine"] = time.perf_counter() - step
        step = time.perf_counter()
        scaling = prepared.scaling
        cp = Checkpoint(snapshot_seq=snapshot_seq, n_base=len(records), labels=labels,
                        mean=scaling.mean, scale=scaling.scale, engine=run.engine,
                        seconds=seconds, started_at=started)
        await in_store(store.save_checkpoint, sid, cp)
        if compute.cluster == "local":  # a cluster's time is its parts' and workers'
            await in_store(planner.observe_base, survey, engine, len(records), seconds, work)
        await survey.move(BASE_DONE, f"base run took {seconds:.2f} s")
        steps["checkpoint"] = time.perf_counter() - step
        result.seconds = seconds
        if releaser is not None:
            step = time.perf_counter()
            base = await releaser.prepare_base(survey, frame, labels, prepared)
            steps["prepare_release"] = result.prepare_seconds = time.perf_counter() - step
            result.base_release = None if base is None else (snapshot_seq, base)
        log.info("survey %s: base run on %d records (%d read ahead) done in %.2f s (%s)", sid,
                 len(records), ahead, seconds,
                 ", ".join(f"{k} {v:.2f} s" for k, v in steps.items()))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.error("survey %s: base run failed (%s); one-shot at close", sid,
                  describe_error(exc), exc_info=withheld(exc))
        await in_store(store.set_error, sid, f"base run failed: {describe_error(exc)}")
        with contextlib.suppress(StoreError):
            await survey.move(OPEN, "base run failed")
        planner.unresolve_engine(survey)
    return result
