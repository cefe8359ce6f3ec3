"""``python -m streamanon.warmup``, which ``make test`` runs before its workers start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamanon import warmup
from tests.conftest import REPO


@pytest.mark.heavy  # compiles every kernel where the cache is cold (make check runs no warm-up)
def test_every_kernel_group_runs_and_the_kernels_are_compiled(capsys):
    from streamanon import metrics, tuples
    from streamanon.engines import _local_search_kernels, _mdav_kernels, cells
    from streamanon.incremental import _nn_kernels

    assert warmup.main(["--processes", "1"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("kernels compiled or loaded from the cache in ")
    for group in warmup.GROUPS:
        assert f"{group} " in said
    for kernel in (_mdav_kernels.mdav_labels, _local_search_kernels.ona_star_labels,
                   _nn_kernels.adjoin, cells.offer_products, metrics._cell_sums,
                   metrics._row_squares, metrics._fit_and_standardise, tuples._row_hashes):
        assert kernel.signatures  # compiled, or loaded, in this process


def _in_a_fresh_process(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_compute_process_warm_up_loads_the_blocked_search_too(subprocesses):
    """The service's compute process loads the NN stages' blocked search at start, not at the
    first close that needs it (a fresh process: nothing loaded before)."""
    _in_a_fresh_process("from streamanon.engines import cells\n"
                        "from streamanon.service.lifecycle import warm_up_compute\n"
                        "assert not cells.offer_products.signatures\n"
                        "warm_up_compute()\n"
                        "assert cells.offer_products.signatures\n")


def test_the_service_loads_the_release_kernels_at_start_not_at_the_first_close(subprocesses):
    """The release standardises its records and takes its loss's cell means and sums of
    squares with kernels, loaded (0.3 s, from the cache) at their first call: the service's
    own process calls them at start."""
    _in_a_fresh_process("from streamanon import metrics\n"
                        "from streamanon.service.lifecycle import warm_up_release\n"
                        "assert not metrics._cell_sums.signatures\n"
                        "warm_up_release()\n"
                        "assert metrics._cell_sums.signatures\n"
                        "assert metrics._row_squares.signatures\n"
                        "assert metrics._fit_and_standardise.signatures\n")


def test_help_says_what_it_does(subprocesses):
    done = subprocess.run([sys.executable, "-m", "streamanon.warmup", "--help"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    assert "numba" in done.stdout and "--processes" in done.stdout


def _cache_dir(root, mode: int, file_mode: int = 0o664):
    """A numba cache as ``--shared`` leaves it: ``root`` with one function's directory and its
    index, the directories of ``mode``."""
    function_dir = root / "engines_0123abcd"
    function_dir.mkdir(parents=True)
    index = function_dir / "_mdav_kernels.mdav_labels-700.py311.nbi"
    index.write_bytes(b"")
    index.chmod(file_mode)
    for directory in (function_dir, root):
        directory.chmod(mode)
    return root


def test_a_group_writable_cache_is_shared(tmp_path):
    assert warmup.sharing_problems(str(_cache_dir(tmp_path / "numba", 0o2775))) == []


@pytest.mark.parametrize(("mode", "file_mode", "problem"), [
    (0o2755, 0o644, "directories the group may not write"),  # root's umask 022
    (0o3777, 0o666, "sticky directories"),  # like /tmp: another's index cannot be replaced
    (0o2775, 0o600, "files the group may not read"),  # a service's umask 077
    (0o775, 0o664, "not setgid")])  # what numba creates would be in the creator's group
def test_what_keeps_other_accounts_out_is_named(tmp_path, mode, file_mode, problem):
    problems = warmup.sharing_problems(str(_cache_dir(tmp_path / "numba", mode, file_mode)))
    assert len(problems) == 1 and problem in problems[0]


def test_shared_compiles_with_a_group_umask_then_checks(tmp_path, monkeypatch, capsys):
    """``--shared``: what is cached while it compiles is writable by the group (umask 002,
    restored after), and the directory is checked; a directory only its owner may write
    fails (status 1, the reason said)."""
    shared = tmp_path / "numba"
    shared.mkdir(mode=0o2775)
    shared.chmod(0o2775)

    def compile_something() -> None:  # as numba creates its cache: default modes
        (shared / "engines_0123abcd").mkdir()
        (shared / "engines_0123abcd" / "index.nbi").write_bytes(b"")

    monkeypatch.setattr(warmup, "GROUPS", {"one": compile_something})
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(shared))
    before = os.umask(0o022)
    try:
        assert warmup.main(["--processes", "1", "--shared"]) == 0
        assert os.umask(0o022) == 0o022  # restored
    finally:
        os.umask(before)
    assert (shared / "engines_0123abcd").stat().st_mode & 0o070 == 0o070
    assert "load them" in capsys.readouterr().out
    shared.chmod(0o755)
    monkeypatch.setattr(warmup, "GROUPS", {"one": lambda: None})
    assert warmup.main(["--processes", "1", "--shared"]) == 1
    assert "directories the group may not write" in capsys.readouterr().err


def test_shared_needs_numba_cache_dir(monkeypatch, capsys):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    with pytest.raises(SystemExit) as exited:
        warmup.main(["--shared"])
    assert exited.value.code == 2 and "NUMBA_CACHE_DIR" in capsys.readouterr().err
