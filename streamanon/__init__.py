"""streamanon: streaming, incremental k-anonymous microaggregation for large e-surveys.

The library part: :func:`microaggregate` for one-shot releases (its options:
:class:`BeyondK`, :class:`TwoStage`, :class:`Output`), the engine registry in
:mod:`streamanon.engines`, and the metrics in :mod:`streamanon.metrics`.
"""

import os

# The compiled kernels run on numba's OpenMP threads. By default idle OpenMP threads spin,
# which is harmless on an idle machine but, when other processes (the collector, the store,
# another survey) compete for the cores, makes every parallel region wait for descheduled
# spinners, several times slower, and far slower still on small inputs. Passive waiting costs
# nothing measurable when the machine is idle. Set before numba is first imported; a value
# given by the user wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from typing import TYPE_CHECKING, Any

from streamanon.errors import (
    InputError,
    KAnonymityError,
    ParameterError,
    StreamanonError,
)

if TYPE_CHECKING:
    from streamanon.api import (
        BeyondK,
        Microaggregation,
        Output,
        TwoStage,
        microaggregate,
        shuffle_rows,
    )

__version__ = "0.1.0"

# The numerical core (numpy, numba and every engine) loads on first use of these names, not
# on ``import streamanon``: the service's ingest worker and most CLI commands never need it.
_LAZY = {name: "streamanon.api" for name in (
    "BeyondK", "Microaggregation", "Output", "TwoStage", "microaggregate", "shuffle_rows")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'streamanon' has no attribute {name!r}")

__all__ = [
    "BeyondK",
    "InputError",
    "KAnonymityError",
    "Microaggregation",
    "Output",
    "ParameterError",
    "StreamanonError",
    "TwoStage",
    "__version__",
    "microaggregate",
    "shuffle_rows",
]
