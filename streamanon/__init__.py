"""streamanon: streaming, incremental k-anonymous microaggregation for large e-surveys.

The library part: :func:`microaggregate` for one-shot releases, the engine registry in
:mod:`streamanon.engines`, and the metrics in :mod:`streamanon.metrics`.
"""

import os

# The compiled kernels run on numba's OpenMP threads. By default idle OpenMP threads spin,
# which is harmless on an idle machine but, when other processes (the collector, the store,
# another survey) compete for the cores, makes every parallel region wait for descheduled
# spinners: MDAV was measured 6x slower at 50,000 records, and up to 500x slower on small
# inputs. Passive waiting costs nothing measurable when the machine is idle. Set before numba
# is first imported; a value given by the user wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from streamanon.api import Microaggregation, microaggregate, shuffle_rows
from streamanon.errors import (
    InputError,
    KAnonymityError,
    ParameterError,
    StreamanonError,
)

__version__ = "0.1.0"

__all__ = [
    "InputError",
    "KAnonymityError",
    "Microaggregation",
    "ParameterError",
    "StreamanonError",
    "__version__",
    "microaggregate",
    "shuffle_rows",
]
