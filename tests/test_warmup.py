"""``python -m streamanon.warmup``, which ``make test`` runs before its workers start."""

from __future__ import annotations

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
