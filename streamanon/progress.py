"""A progress counter that compiled engines advance and a user interface may read.

Engines run inside numba and cannot call back into Python cheaply, so they write into a small
shared array instead; the CLI runs the engine in a worker thread and polls the counter.
"""

from __future__ import annotations

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
