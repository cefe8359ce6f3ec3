"""The base run of a survey while it is open (design spec §5): the snapshot read from the
store, the base engine in the compute process, the checkpoint stored, the base release
prepared for the close to splice (:meth:`.releasing.Releaser.prepare_base`).

Everything but the engine runs in threads, never on the event loop, so ingest and HTTP go on
while a million-record snapshot is read and prepared. Each step's time goes to the survey's
``base_steps`` and from there to the release report (``base_steps_seconds``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import Executor
from typing import TYPE_CHECKING

from streamanon.errors import describe_error, withheld
from streamanon.release import prepare_stored
from streamanon.service.kept import kept_base_partition
from streamanon.service.publisher import records_frame
from streamanon.service.releasing import release_run
from streamanon.service.runtime import StoreCall, SurveyRuntime
from streamanon.service.states import BASE_DONE, OPEN
from streamanon.service.store import Checkpoint, Store, StoreError

if TYPE_CHECKING:
    from streamanon.service.config import ComputeConfig
    from streamanon.service.planning import SurveyPlanner
    from streamanon.service.releasing import Releaser

log = logging.getLogger(__name__)


async def run_base(rt: SurveyRuntime, snapshot_seq: int, started: float, *, store: Store,
                   in_store: StoreCall, pool: Executor, compute: ComputeConfig,
                   planner: SurveyPlanner, releaser: Releaser | None) -> None:
    """Run the base engine on the survey's records up to ``snapshot_seq`` and store its
    checkpoint (``BASE_DONE``); a failure is logged and stored as the survey's error, the
    survey goes back to ``OPEN`` and the release is made one-shot at close."""
    sc = rt.config
    sid = sc.id
    m = len(sc.quasi_identifiers)
    loop = asyncio.get_running_loop()
    steps = rt.base_steps = {}
    try:
        step = time.perf_counter()
        records = await in_store(lambda: store.load_records(sid, m, upto_seq=snapshot_seq))
        steps["load"] = time.perf_counter() - step
        step = time.perf_counter()
        frame = await asyncio.to_thread(records_frame, records, sc)
        prepared = await asyncio.to_thread(prepare_stored, frame, sc.schema, sc.k)
        steps["prepare"] = time.perf_counter() - step
        step = time.perf_counter()
        if compute.cluster == "local":  # its values kept there
            labels, seconds = await loop.run_in_executor(
                pool, kept_base_partition, sid, snapshot_seq, release_run(sc), prepared)
        else:  # the compute process cuts the snapshot and is the cluster's client
            from streamanon.cluster import partitioned_base

            labels, seconds = await loop.run_in_executor(
                pool, partitioned_base, release_run(sc), prepared, compute.cluster,
                compute.part_size, rt.auto_engine and not sc.engine_params)
        steps["engine"] = time.perf_counter() - step
        step = time.perf_counter()
        scaling = prepared.scaling
        cp = Checkpoint(snapshot_seq=snapshot_seq, n_base=len(records), labels=labels,
                        mean=scaling.mean, scale=scaling.scale, engine=sc.engine,
                        seconds=seconds, started_at=started)
        await in_store(store.save_checkpoint, sid, cp)
        if compute.cluster == "local":  # a cluster's time is its parts' and workers'
            await in_store(planner.observe_base, sc, len(records), seconds)
        await in_store(store.transition, sid, BASE_DONE, f"base run took {seconds:.2f} s")
        steps["checkpoint"] = time.perf_counter() - step
        rt.timings["base_seconds"] = seconds
        if releaser is not None:
            step = time.perf_counter()
            await releaser.prepare_base(rt, snapshot_seq, frame, labels, prepared)
            steps["prepare_release"] = time.perf_counter() - step
        log.info("survey %s: base run on %d records done in %.2f s (%s)", sid, len(records),
                 seconds, ", ".join(f"{k} {v:.2f} s" for k, v in steps.items()))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.error("survey %s: base run failed (%s); one-shot at close", sid,
                  describe_error(exc), exc_info=withheld(exc))
        await in_store(store.set_error, sid, f"base run failed: {describe_error(exc)}")
        with contextlib.suppress(StoreError):
            await in_store(store.transition, sid, OPEN, "base run failed")
        planner.unresolve_engine(sid)
    finally:
        rt.base_task = None
