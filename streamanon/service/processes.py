"""Helper processes of the service (ingest worker, compute pool) and their lifetime."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def die_with_parent() -> None:
    """Process initializer: exit when the service process dies, even by SIGKILL, so no
    orphaned worker outlives it (Linux prctl PR_SET_PDEATHSIG, else a watchdog thread)."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGKILL) == 0:  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)
            return
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _init(initializer: Any, args: tuple[Any, ...]) -> None:
    die_with_parent()
    if initializer is not None:
        initializer(*args)


def worker_pool(workers: int = 1, initializer: Any = None,
                initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """A spawn-context process pool whose processes die with this one."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init, initargs=(initializer, initargs))
