"""Running the parts of a partitioned base run on a Dask cluster.

The cutting and the joining are in :mod:`streamanon.engines.partitioned`, pure; this module only
connects to Dask (:func:`open_client`) and evaluates the per-part function on its workers
(:func:`dask_runner`), which the partitioned engine receives from its caller
(:func:`part_runner`). It sits above the numerical core, beside the CLI and the service: it
opens network clients, and the core never imports it. Workers need nothing but
``pip install streamanon`` (the same version): each task is a module-level function of
streamanon and one part's matrix.

Each part travels inside its task (``client.submit(function, part)``), not through
``client.scatter``: the scheduler then holds what it needs to run the task again, so when a
worker dies mid-run Dask reschedules its parts on the other workers (up to
``distributed.scheduler.allowed-failures`` deaths per part, default 3), whereas scattered data
dies with its worker (dask/distributed#3149). ``retries`` re-runs a part that raised. At most
``in_flight`` parts (default: two per worker thread) are submitted at a time, so the client and
the scheduler hold a few parts, not a copy of the whole data set.

A part runs with one numba thread (:func:`one_thread`): on a Dask worker each worker thread is
meant to be a core, as Dask sets ``OMP_NUM_THREADS=1`` for the same reason, and two worker
processes on two cores would otherwise run four threads of the parallel kernels (MDAV's
screening, ONA*'s candidate lists). The labels do not depend on the thread count.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from streamanon.engines.partitioned import PartFunction, PartRunner
from streamanon.errors import ParameterError, StreamanonError

if TYPE_CHECKING:
    from streamanon.incremental.run import TwoStageRun
    from streamanon.release import Prepared

CONNECT_TIMEOUT = 10.0  # seconds to reach the scheduler and to see a worker
DEFAULT_RETRIES = 2

_LOCAL = re.compile(r"local-(\d+)")


class ClusterError(StreamanonError):
    """The Dask cluster cannot be reached, has no workers, or lost a part for good."""


def check_cluster(cluster: str) -> str:
    """``cluster`` if it is ``"local"``, ``"local-N"`` or a scheduler address, else a
    :class:`ParameterError` saying which forms are accepted."""
    if not isinstance(cluster, str) or not (
            cluster == "local" or _LOCAL.fullmatch(cluster) or "://" in cluster):
        raise ParameterError(f"cluster must be 'local', 'local-N' (N worker processes on this "
                             f"machine) or a Dask scheduler address such as "
                             f"tcp://scheduler:8786, got {cluster!r}")
    match = _LOCAL.fullmatch(cluster)
    if match and int(match.group(1)) < 1:
        raise ParameterError(f"{cluster}: a local cluster needs at least one worker")
    return cluster


@contextlib.contextmanager
def open_client(cluster: str, *, timeout: float | None = None) -> Iterator[object]:
    """A ``distributed.Client`` for ``cluster`` while the block runs.

    ``"local-N"`` starts a ``LocalCluster`` of N single-threaded worker processes for the
    block; an address such as ``tcp://scheduler:8786`` connects to a running scheduler, and
    raises :class:`ClusterError` when it cannot be reached or shows no worker within
    ``timeout`` seconds (:data:`CONNECT_TIMEOUT` by default; never waits for ever).
    """
    from distributed import Client, LocalCluster

    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    check_cluster(cluster)
    if cluster == "local":
        raise ParameterError("cluster 'local' runs in this process; there is no client to open")
    match = _LOCAL.fullmatch(cluster)
    with contextlib.ExitStack() as stack:
        if match:
            local = stack.enter_context(LocalCluster(
                n_workers=int(match.group(1)), threads_per_worker=1, processes=True,
                dashboard_address=":0", silence_logs=logging.ERROR))
            client = stack.enter_context(Client(local))
        else:
            try:
                client = stack.enter_context(Client(cluster, timeout=timeout))
            except (OSError, TimeoutError) as exc:
                raise ClusterError(
                    f"cannot reach the Dask scheduler at {cluster} within {timeout:g} s "
                    f"({type(exc).__name__}); start one with 'dask scheduler' and workers "
                    f"with 'dask worker {cluster}', or check the address") from None
        try:
            client.wait_for_workers(1, timeout=timeout)
        except (OSError, TimeoutError):
            raise ClusterError(f"the Dask scheduler at {cluster} has no worker after "
                               f"{timeout:g} s; start some with 'dask worker {cluster}' (each "
                               "needs 'pip install streamanon')") from None
        yield client


@contextlib.contextmanager
def part_runner(cluster: str, *, timeout: float | None = None) -> Iterator[PartRunner | None]:
    """The ``runner`` of the ``partitioned`` engine for ``cluster`` while the block runs:
    ``None`` for ``"local"`` (the parts run one after the other in this process), else a
    :func:`dask_runner` on a client of :func:`open_client`.

    >>> with part_runner("local") as runner:
    ...     runner is None
    True
    """
    check_cluster(cluster)
    if cluster == "local":
        yield None
        return
    with open_client(cluster, timeout=timeout) as client:
        yield dask_runner(client)


def one_thread(function: PartFunction, array: np.ndarray) -> np.ndarray:
    """``function(array)`` with one numba thread in this (worker) thread."""
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        return function(array)
    finally:
        numba.set_num_threads(before)


def dask_runner(client: object, *, retries: int = DEFAULT_RETRIES,
                in_flight: int | None = None) -> PartRunner:
    """A :data:`~streamanon.engines.partitioned.PartRunner` that evaluates each part on the
    workers of ``client``, at most ``in_flight`` parts at a time, yielding them as they
    finish."""
    from distributed import as_completed

    def run(function: PartFunction,
            arrays: Iterable[np.ndarray]) -> Iterator[tuple[int, np.ndarray]]:
        import dask

        threads = sum(client.nthreads().values())  # type: ignore[attr-defined]
        window = in_flight or max(2, 2 * threads)
        run_id = uuid.uuid4().hex[:12]
        todo = enumerate(arrays)
        index: dict[object, int] = {}
        pending = as_completed()

        def submit() -> None:
            part = next(todo, None)
            if part is not None:
                future = client.submit(  # type: ignore[attr-defined]
                    one_thread, function, part[1], key=f"streamanon-part-{run_id}-{part[0]}",
                    pure=False, retries=retries)
                index[future] = part[0]
                pending.add(future)

        # each part is embedded in its task on purpose (see the module docstring)
        with dask.config.set({"distributed.admin.large-graph-warning-threshold": "4GiB"}):
            for _ in range(window):
                submit()
            for future in pending:
                p = index.pop(future)
                try:
                    labels = future.result()
                except StreamanonError:
                    raise
                except Exception as exc:
                    raise ClusterError(
                        f"part {p} failed on the cluster ({type(exc).__name__}: {exc}); "
                        "the workers need the same streamanon version as this machine"
                    ) from exc
                future.release()
                yield p, labels
                submit()

    return run


def partitioned_base(run: TwoStageRun, prepared: Prepared, cluster: str,
                     part_size: int, default_parts: bool = False) -> tuple[np.ndarray, float]:
    """The service's base run (:func:`streamanon.release.base_partition`) with ``run``'s engine
    applied part by part on ``cluster``: labels and seconds. Runs in the compute process, which
    is then the Dask client; the incremental stage stays with ``run``. ``default_parts``: the
    survey named no engine (``engine = "auto"``), so the parts run the default part engine
    (:data:`streamanon.engines.partitioned.DEFAULT_PART_ENGINE`) whatever ``auto`` chose."""
    from streamanon.engines.partitioned import DEFAULT_PART_ENGINE, DEFAULT_PART_PARAMS
    from streamanon.incremental.run import TwoStageRun
    from streamanon.release import base_partition

    engine, params = ((DEFAULT_PART_ENGINE, dict(DEFAULT_PART_PARAMS)) if default_parts
                      else (run.engine, run.engine_params))
    with part_runner(cluster) as runner:
        parted = TwoStageRun(run.k, "partitioned", run.incremental,
                             engine_params={"engine": engine, "engine_params": params,
                                            "part_size": part_size, "runner": runner},
                             incremental_params=run.incremental_params)
        return base_partition(parted, prepared)
