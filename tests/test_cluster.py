"""Partitioned runs on a Dask cluster (streamanon.cluster, streamanon.engines.partitioned).

One LocalCluster of two single-threaded worker processes serves the module. The partitioned
run on it must equal the same parts run here, also when a worker dies mid-run or a part raises.
"""

from __future__ import annotations

import json
import os
import socket
import time
from functools import partial
from pathlib import Path

import distributed
import numpy as np
import pandas as pd
import pytest

from streamanon.cli import main
from streamanon.cluster import ClusterError, check_cluster, dask_runner, open_client, part_runner
from streamanon.engines import run_engine
from streamanon.engines.partitioned import (
    cut_parts,
    partitioned,
    partitioned_labels,
)
from streamanon.errors import ParameterError
from streamanon.metrics import standardise

K = 5
PART = 400


@pytest.fixture(scope="module")
def dask_client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def X() -> np.ndarray:
    return standardise(np.random.default_rng(7).standard_normal((3000, 4)))


def die_once(marker: str, function, array: np.ndarray) -> np.ndarray:
    """``function(array)``, after killing this worker process the first time it is called."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os._exit(1)
    return function(array)


def raise_once(marker: str, function, array: np.ndarray) -> np.ndarray:
    if not os.path.exists(marker):
        Path(marker).touch()
        raise RuntimeError("a transient failure")
    return function(array)


def wrapped_runner(dask_client, wrapper, marker: Path):
    inner = dask_runner(dask_client)
    return lambda function, arrays: inner(partial(wrapper, str(marker), function), arrays)


@pytest.mark.parametrize(("engine", "params"), [("mdav", {}), ("ona_star", {}),
                                                ("ona_star", {"start": "mdav", "max_rounds": 6,
                                                              "candidates": 24}),
                                                ("mona", {"rho": 0.6, "n_threads": 1})])
def test_the_cluster_run_equals_the_local_run_with_the_same_parts(dask_client, X, engine, params):
    here = partitioned_labels(X, K, engine=engine, engine_params=params, part_size=PART)
    there = partitioned_labels(X, K, engine=engine, engine_params=params, part_size=PART,
                               runner=dask_runner(dask_client))
    assert len(cut_parts(X, K, PART)) > 4
    np.testing.assert_array_equal(there, here)


def test_a_worker_killed_mid_run_is_replaced_and_the_result_is_unchanged(dask_client, X, tmp_path):
    marker = tmp_path / "killed"
    here = partitioned_labels(X, K, part_size=PART)
    there = partitioned_labels(X, K, part_size=PART,
                               runner=wrapped_runner(dask_client, die_once, marker))
    assert marker.exists()  # a worker did die
    np.testing.assert_array_equal(there, here)


def test_a_part_that_raises_once_is_retried(dask_client, X, tmp_path):
    marker = tmp_path / "raised"
    there = partitioned_labels(X, K, part_size=PART,
                               runner=wrapped_runner(dask_client, raise_once, marker))
    assert marker.exists()
    np.testing.assert_array_equal(there, partitioned_labels(X, K, part_size=PART))


def test_every_cell_has_at_least_k_and_every_record_one_cell(dask_client, X):
    labels = partitioned_labels(X, K, part_size=PART, runner=dask_runner(dask_client, in_flight=1))
    assert labels.shape == (len(X),) and labels.min() == 0
    sizes = np.bincount(labels)
    assert sizes.min() >= K and sizes.sum() == len(X)


def test_the_python_form_of_the_guide_runs_the_parts_on_the_cluster(dask_client, X):
    address = dask_client.scheduler.address
    with part_runner(address) as runner:
        assert runner is not None
        there = run_engine("partitioned", X, K, engine="mdav", part_size=PART, runner=runner)
    np.testing.assert_array_equal(there, run_engine("partitioned", X, K, engine="mdav",
                                                    part_size=PART))


def test_the_parts_cover_the_records_once_within_the_size_limits(X):
    parts = cut_parts(X, K, PART)
    rows = np.concatenate(parts)
    np.testing.assert_array_equal(np.sort(rows), np.arange(len(X)))
    assert all(K <= len(p) <= PART for p in parts)


def test_the_partitioned_run_is_deterministic_and_one_part_is_the_engine_itself(X):
    a, b = (partitioned(X, K, part_size=PART) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(partitioned(X, K, part_size=len(X)), run_engine("mdav", X, K))


def test_bad_parameters_are_refused_with_what_to_do(X):
    with pytest.raises(ParameterError, match="part_runner"):
        run_engine("partitioned", X, K, runner="tcp://somewhere:8786")
    with pytest.raises(ParameterError, match="local-N"):
        check_cluster("somewhere")
    with pytest.raises(ParameterError, match="per-record"):
        run_engine("partitioned", X, K, engine="dependence")
    with pytest.raises(ParameterError, match="part_size"):
        run_engine("partitioned", X, K, part_size=0)


def test_the_service_base_run_on_the_cluster_equals_the_partitioned_local_run(dask_client):
    from streamanon.cluster import partitioned_base
    from streamanon.incremental.run import TwoStageRun
    from streamanon.release import base_partition, prepare
    from streamanon.schema import quick_schema

    frame = pd.DataFrame(np.random.default_rng(5).standard_normal((1200, 3)),
                         columns=["a", "b", "c"])
    prepared = prepare(frame, quick_schema(["a", "b", "c"], ["a", "b", "c"]), K)
    run = TwoStageRun(K, "mdav", "nn_split_end")
    labels, seconds = partitioned_base(run, prepared, dask_client.scheduler.address, 300)
    here, _ = base_partition(TwoStageRun(K, "partitioned", "nn_split_end",
                                         engine_params={"part_size": 300}), prepared)
    np.testing.assert_array_equal(labels, here)
    assert seconds > 0 and np.bincount(labels).min() >= K
    # a survey that named no engine: the parts run the default part engine
    labels, _ = partitioned_base(run, prepared, dask_client.scheduler.address, 300,
                                 default_parts=True)
    here, _ = base_partition(TwoStageRun(K, "partitioned", "nn_split_end", engine_params={
        "part_size": 300, "engine": "ona_star",
        "engine_params": {"start": "mdav", "max_rounds": 6, "candidates": 24}}), prepared)
    np.testing.assert_array_equal(labels, here)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_scheduler_is_an_error_after_the_timeout():
    started = time.monotonic()
    with pytest.raises(ClusterError, match="cannot reach"), \
            open_client(f"tcp://127.0.0.1:{closed_port()}", timeout=1.0):
        pass
    assert time.monotonic() - started < 30


@pytest.fixture
def survey(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.standard_normal((1500, 3)), columns=["a", "b", "c"])
    frame.insert(0, "id", np.arange(len(frame)))
    path = tmp_path / "survey.csv"
    frame.to_csv(path, index=False)
    return path


ARGS = ["--k", str(K), "--qi", "a,b,c", "--drop", "id", "--seed", "1", "--no-progress",
        "--part-size", "300"]


# the forms of docs/guide/scaling.md: the default (MDAV then ONA*'s local search on each
# part), and MDAV alone on each part
PART_ENGINES = [("ona_star", []), ("mdav", ["--engine", "mdav"])]
SPELLED_OUT = ["--engine", "ona_star", "--param", "start=mdav", "--param", "max_rounds=6",
               "--param", "candidates=24"]


def test_without_an_engine_the_parts_run_mdav_and_the_local_search(survey, tmp_path, capsys):
    """anonymize --cluster with no other setting: each part runs MDAV and six rounds of ONA*'s
    local search (DEFAULT_PART_ENGINE), the release of the spelled-out form, with a loss no
    higher than MDAV alone on the same parts."""
    out = {name: tmp_path / f"{name}.csv" for name in ("default", "spelled", "mdav")}
    assert main(["anonymize", str(survey), *ARGS, "--out", str(out["default"])]) == 0
    assert "ona_star in parts of 300 (local)" in capsys.readouterr().out
    assert main(["anonymize", str(survey), *ARGS, *SPELLED_OUT,
                 "--out", str(out["spelled"])]) == 0
    assert main(["anonymize", str(survey), *ARGS, "--engine", "mdav",
                 "--out", str(out["mdav"])]) == 0
    frames = {name: pd.read_csv(path) for name, path in out.items()}
    pd.testing.assert_frame_equal(frames["default"], frames["spelled"])
    reports = {name: json.loads(path.with_suffix(".report.json").read_text())
               for name, path in out.items()}
    assert reports["default"]["information_loss"] <= reports["mdav"]["information_loss"]


@pytest.mark.parametrize(("engine", "engine_args"), PART_ENGINES)
def test_the_cli_runs_on_the_cluster_and_writes_the_local_release(dask_client, survey, tmp_path,
                                                                   capsys, engine, engine_args):
    address = dask_client.scheduler.address
    args = [*ARGS, *engine_args]
    assert main(["anonymize", str(survey), *args, "--out", str(tmp_path / "here.csv")]) == 0
    assert main(["anonymize", str(survey), *args, "--cluster", address,
                 "--out", str(tmp_path / "there.csv")]) == 0
    assert f"{engine} in parts of 300" in capsys.readouterr().out
    here, there = (pd.read_csv(tmp_path / f"{name}.csv") for name in ("here", "there"))
    pd.testing.assert_frame_equal(there, here)
    assert there.groupby(["a", "b", "c"]).size().min() >= K


def test_the_cli_says_when_the_scheduler_cannot_be_reached(survey, tmp_path, capsys,
                                                            monkeypatch):
    monkeypatch.setattr("streamanon.cluster.CONNECT_TIMEOUT", 2.0)
    started = time.monotonic()
    code = main(["anonymize", str(survey), *ARGS, "--cluster",
                 f"tcp://127.0.0.1:{closed_port()}", "--out", str(tmp_path / "out.csv")])
    assert code == 2 and time.monotonic() - started < 60
    err = capsys.readouterr().err
    assert "cannot reach the Dask scheduler" in err and "dask scheduler" in err
    assert "within 2 s" in err
    assert not (tmp_path / "out.csv").exists()


def test_the_cli_help_explains_the_cluster_options(capsys):
    with pytest.raises(SystemExit):
        main(["anonymize", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--cluster WHERE" in text and "dask worker tcp://HOST:8786" in text
    assert "--part-size N" in text


def test_the_readme_worker_commands_serve_a_cli_run(subprocesses, survey, tmp_path):
    """The worker side as docs/guide/scaling.md runs it: `dask scheduler`, `dask worker tcp://...
    --nworkers N --nthreads 1`, then `streamanon anonymize --cluster tcp://...` as commands;
    the release equals the local run's."""
    import shutil
    import signal
    import subprocess
    import sys

    from streamanon.service.broker import free_port

    dask = shutil.which("dask", path=str(Path(sys.executable).parent))
    assert dask is not None, "the dask command comes with distributed, a dependency"
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)]
    try:
        procs.append(subprocess.Popen([dask, "worker", address, "--nworkers", "2",
                                       "--nthreads", "1", "--no-dashboard"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True))
        streamanon = [sys.executable, "-m", "streamanon", "anonymize", str(survey), *ARGS]
        for _ in range(12):  # the scheduler takes a few seconds to listen on a loaded machine
            there = subprocess.run([*streamanon, "--cluster", address,
                                    "--out", str(tmp_path / "there.csv")],
                                   capture_output=True, text=True, timeout=300)
            if there.returncode == 0 or "cannot reach" not in there.stderr:
                break
        assert there.returncode == 0, there.stderr
        assert subprocess.run([*streamanon, "--out", str(tmp_path / "here.csv")],
                              capture_output=True, timeout=300).returncode == 0
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "there.csv"),
                                      pd.read_csv(tmp_path / "here.csv"))
    finally:
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
