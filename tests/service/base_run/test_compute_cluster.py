"""``[compute] cluster``: the service's base run goes to a Dask cluster part by part (issue 19,
point 1); the incremental stage and the k-anonymity gate stay in the service, and the
cluster's run time is not taken for the local engine's (its cost model keeps its own runs).

The service runs in this process against the embedded broker, its compute pool in a thread;
the cluster is a ``LocalCluster`` of one worker process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import distributed
import numpy as np
import pandas as pd

from scheduler.cost_model import CostModelStore
from streamanon.service.config import load_config
from streamanon.service.lifecycle import Service
from tests.service.conftest import write_config
from tests.service.kafka_helpers import produce, response
from tests.service.lifecycle_helpers import ThreadComputePool, collect, put_model, release, run_base

SURVEY = "wellbeing"
M, K, N_BASE, N_LATE, PART = 3, 5, 300, 40, 100


def _samples(path: Path) -> list[tuple[int, float, str]]:
    return CostModelStore(path).samples("mdav", M, K)


def test_the_base_run_goes_to_the_cluster_and_the_release_is_gated_here(broker, tmp_path):
    models = tmp_path / "cost_models.json"
    put_model(models, "mdav", M, K, [(1000, 0.001), (2000, 0.003)])  # no calibration
    calibrated = _samples(models)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        path, env = write_config(
            tmp_path, broker.bootstrap, survey=SURVEY, k=K, engine="mdav",
            extra=f'cost_models = "{models}"\n\n[compute]\ncluster = "{cluster.scheduler_address}"'
                  f"\npart_size = {PART}")
        config = load_config(path, env)
        assert config.compute.cluster == cluster.scheduler_address

        async def run() -> tuple[dict, Any]:
            service = Service(config, compute_pool=ThreadComputePool())
            await service.start()
            try:
                plan = await collect(service, broker.bootstrap, config, SURVEY, N_BASE)
                await run_base(service, SURVEY, plan)
                checkpoint = await asyncio.to_thread(service.store.load_checkpoint, SURVEY)
                await asyncio.to_thread(
                    produce, broker.bootstrap, config.topic(SURVEY, "responses"),
                    [(None, response(i)) for i in range(N_BASE, N_BASE + N_LATE)])
                return await release(service, SURVEY), checkpoint
            finally:
                await service.stop()

        report, checkpoint = asyncio.run(run())
        prefixes = set(cluster.scheduler.task_prefixes)
    # the base run was cut into parts that ran on the cluster's worker
    assert any(p.startswith("streamanon-part") for p in prefixes), prefixes
    assert checkpoint.n_base >= N_BASE
    sizes = np.bincount(checkpoint.labels)
    assert sizes.min() >= K and sizes.sum() == checkpoint.n_base
    assert len(sizes) >= checkpoint.n_base // PART  # at least one cell per part
    # the release: two-stage, every response once, every cell k or more (the gate, here)
    assert report["mode"] == "two-stage" and report["n"] == N_BASE + N_LATE
    assert report["n_base"] == checkpoint.n_base
    released = pd.read_parquet(report["files"]["parquet"])
    assert len(released) == N_BASE + N_LATE
    assert released.groupby(["age", "income", "height"]).size().min() >= K
    # the cluster's time is not a run of local MDAV: the cost model is as calibrated
    assert _samples(models) == calibrated
