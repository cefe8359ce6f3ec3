from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest_plugins = ["tests.browser", "pytester"]  # ``browser`` (headless Chromium), ``pytester``

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO / "tests" / "data"  # Census, Tarragona, EIA (tests/data/README.md)


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    if not (DATASETS / "census.csv").exists():
        pytest.fail(f"benchmark datasets not found at {DATASETS}")
    return DATASETS


@pytest.fixture(scope="session")
def benchmark_data(datasets_dir: Path) -> dict[str, np.ndarray]:
    return {
        name: pd.read_csv(datasets_dir / f"{name}.csv").to_numpy(dtype=np.float64)
        for name in ("census", "tarragona", "eia")
    }


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path_factory, monkeypatch):
    """Cost models and other state go to a temporary directory, never the user's home."""
    monkeypatch.setenv("STREAMANON_DATA_DIR", str(tmp_path_factory.mktemp("data")))


# -- the two suites --------------------------------------------------------------------------
# `make test` runs every test; `make check` (the fast inner loop) deselects the tests that need
# a broker, PostgreSQL, a browser, a Dask cluster or a child process. The markers follow from
# the fixtures a test uses, so nobody has to remember them: a fixture that starts such a thing
# (or depends on one that does) is listed here, and a test that starts a child process without
# the ``subprocesses`` fixture fails, saying so (the guard below).
RESOURCES = {
    "kafka": {"broker", "tls_broker", "apache_kafka_broker", "tansu_broker", "kafka_cluster",
              "sasl_kafka"},
    "postgres": {"postgres_url", "pg_server"},
    "browser": {"browser"},
    "dask": {"dask_client", "dask_clusters"},
    "process": {"subprocesses", "service_factory", "restartable"},
}
# ``heavy`` is set by hand on a test whose own computation takes seconds (a large reference
# comparison, a quick paper report): ``make check`` leaves it to ``make test`` as well.
SLOW_MARKERS = (*RESOURCES, "heavy")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the fixtures it uses; then put the marked tests first (in their
    order): they wait on brokers, servers and processes, and one that starts last would keep
    the whole run waiting while the other workers have nothing left to do. The slowest tests
    of a recent run start first on every worker (:func:`tests.durations.spread`)."""
    from tests.durations import MEASURING

    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in RESOURCES.items():
            if used & fixtures:
                item.add_marker(marker)
        if item.nodeid in MEASURING:  # make test runs it alone, after the others
            item.add_marker("measuring")
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in SLOW_MARKERS))
    # and the slowest of all at the fronts of the workers' shares (tests/durations.py)
    from tests.durations import known, spread

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = spread(items, [item.nodeid for item in items], known(), workers)


@pytest.fixture(scope="session")
def subprocesses() -> None:
    """Requested by a test (or a fixture of any scope) that starts streamanon, make or a
    script as a child process: the test is then marked ``process`` (``make test`` runs it,
    ``make check`` does not)."""


@pytest.fixture(scope="session")
def kafka_cluster() -> None:
    """Requested by a test that starts Apache Kafka nodes of its own (a three-node cluster, a
    broker that must fail to start): the test is then marked ``kafka``."""


@pytest.fixture(scope="session")
def dask_clusters() -> None:
    """Requested by a test (or fixture) that starts Dask clusters of its own (``local-N``):
    the test is then marked ``dask``."""


class ChildProcessInFastTest(RuntimeError):
    pass


def _guarded(item: pytest.Item):
    """A test with none of the markers above may not start a child process, in its own body
    or in a fixture of any scope it sets up: it would slow the fast suite down or need what
    the fast suite lacks, so it fails and says what to declare. Teardown is free: a
    module-scoped server is stopped after whichever of the module's tests ran last.
    ``multiprocessing`` (an engine's worker pool, the service's compute process) does not go
    through ``subprocess`` and stays allowed."""
    if any(item.get_closest_marker(m) for m in RESOURCES):
        yield
        return
    import subprocess

    original = subprocess.Popen.__init__

    def refuse(self, args, *a, **kw):
        raise ChildProcessInFastTest(
            f"{item.nodeid} starts a child process ({args!r}) without the `subprocesses` "
            "fixture: request it, so that `make check` leaves the test to `make test`")

    subprocess.Popen.__init__ = refuse
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    yield from _guarded(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    yield from _guarded(item)
