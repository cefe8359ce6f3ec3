"""What else the machine is doing while this process times an engine.

:func:`load_meter` is the service's :data:`scheduler.cost_model.LoadMeter`: from the
machine-wide CPU time (``/proc/stat``) less this process's own (``os.times``), it measures how
many cores other work used while a timing ran, and turns that into the slow-down the plan
assumes for a busy machine (:func:`scheduler.live.load_slowdown`, ``1 + other / cores``). A
calibration timed beside a test suite or a demo's broker is then kept as the quiet machine's
timing, and the plan prices the load when the survey runs (the load average then). Where
``/proc/stat`` cannot be read the meter says quiet (1).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from scheduler.live import load_slowdown

#: The fields of ``/proc/stat``'s first line that are busy time: user, nice, system, irq,
#: softirq, steal (idle and iowait are not).
_BUSY = (0, 1, 2, 5, 6, 7)


def _busy_seconds() -> float | None:
    """The CPU seconds every core of the machine has been busy since boot, or None."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return sum(int(fields[1 + i]) for i in _BUSY if 1 + i < len(fields)) / ticks


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


def usable_cores() -> int:
    """The cores this process may run on (the engines' kernels use them all)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def machine_load() -> tuple[float, int]:
    """The machine's load now: the one-minute load average and :func:`usable_cores`. A
    system without a load average plans as on a quiet machine."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return load, usable_cores()


def load_meter() -> Callable[[], float]:
    """Start measuring; the function returned gives the slow-down since (at least 1)."""
    busy, own, wall = _busy_seconds(), _own_seconds(), time.monotonic()

    def stop() -> float:
        now = _busy_seconds()
        elapsed = time.monotonic() - wall
        if busy is None or now is None or elapsed <= 0:
            return 1.0
        other = max((now - busy) - (_own_seconds() - own), 0.0) / elapsed
        return load_slowdown(other, usable_cores())

    return stop
