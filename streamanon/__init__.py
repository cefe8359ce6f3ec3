"""streamanon: streaming, incremental k-anonymous microaggregation for large e-surveys.

The library part: :func:`microaggregate` for one-shot releases, the engine registry in
:mod:`streamanon.engines`, and the metrics in :mod:`streamanon.metrics`.
"""

from streamanon.api import Microaggregation, microaggregate, shuffle_rows
from streamanon.errors import InputError, KAnonymityError, ParameterError, StreamanonError

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
