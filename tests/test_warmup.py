"""``python -m streamanon.warmup``, which ``make test`` runs before its workers start."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streamanon import warmup
from tests.conftest import REPO


@pytest.mark.heavy  # compiles every kernel where the cache is cold (make check runs no warm-up)
def test_every_kernel_group_runs_and_the_kernels_are_compiled(capsys):
    from streamanon.engines import _local_search_kernels, _mdav_kernels
    from streamanon.incremental import _nn_kernels

    assert warmup.main(["--processes", "1"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("kernels compiled or loaded from the cache in ")
    for group in warmup.GROUPS:
        assert f"{group} " in said
    for kernel in (_mdav_kernels.mdav_labels, _local_search_kernels.ona_star_labels,
                   _nn_kernels.adjoin):
        assert kernel.signatures  # compiled, or loaded, in this process


def test_help_says_what_it_does(subprocesses):
    done = subprocess.run([sys.executable, "-m", "streamanon.warmup", "--help"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    assert "numba" in done.stdout and "--processes" in done.stdout
