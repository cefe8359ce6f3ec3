"""A progress counter that compiled engines advance and a user interface may read, with the
name of the phase the work is in.

Engines run inside numba and cannot call back into Python cheaply, so they write into a small
shared array instead; the CLI runs the engine in a worker thread and polls the counter.
"""

from __future__ import annotations

import time

import numpy as np


class Progress:
    """Records assigned to a cell so far, out of a total.

    Examples
    --------
    >>> p = Progress()
    >>> p.start(100)
    >>> p.counter[0] = 40
    >>> p.fraction
    0.4
    """

    def __init__(self) -> None:
        self.counter = np.zeros(2, dtype=np.int64)
        #: What the work is doing now, in a few words ("engine mdav", "release table");
        #: a user interface shows it with the counter.
        self.phase = ""
        #: When the phase began (``time.perf_counter``), for a rate.
        self.since = time.perf_counter()

    def enter(self, phase: str) -> None:
        """A new phase: its name, and the counter back to nothing counted (an engine that
        counts its records calls :meth:`start`)."""
        self.phase = phase
        self.since = time.perf_counter()
        self.counter[:] = 0

    def start(self, total: int) -> None:
        self.counter[0] = 0
        self.counter[1] = total

    def finish(self) -> None:
        self.counter[0] = self.counter[1]

    @property
    def done(self) -> int:
        return int(self.counter[0])

    @property
    def total(self) -> int:
        return int(self.counter[1])

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0
