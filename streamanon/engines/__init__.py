"""The engine registry (specification section 5, docs/design/specification.md).

An engine maps a standardised matrix ``X`` (n x m), the anonymity parameter ``k`` and its own
keyword parameters to an integer label array of length n in which every label occurs at least
``k`` times. Engines are registered by name; the CLI, the service and the planner select them by
name through :func:`get_engine` and call them through :func:`run_engine`, which validates the
input and checks the partition it gets back.
"""

# Engines register themselves on import.
from streamanon.engines import dependence as _dependence  # noqa: F401
from streamanon.engines import lda_mdav as _lda_mdav  # noqa: F401
from streamanon.engines import mdav as _mdav  # noqa: F401
from streamanon.engines import mondrian as _mondrian  # noqa: F401
from streamanon.engines import ona as _ona  # noqa: F401
from streamanon.engines import partitioned as _partitioned  # noqa: F401
from streamanon.engines import pca_mdav as _pca_mdav  # noqa: F401
from streamanon.engines import tcloseness as _tcloseness  # noqa: F401
from streamanon.engines.base import (
    EngineFunction,
    EngineInfo,
    available_engines,
    check_parameters,
    get_engine,
    model_parameters,
    register,
    run_engine,
    unregister,
    validate_input,
)

__all__ = [
    "EngineFunction",
    "EngineInfo",
    "available_engines",
    "check_parameters",
    "get_engine",
    "model_parameters",
    "register",
    "run_engine",
    "unregister",
    "validate_input",
]
