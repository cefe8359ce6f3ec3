"""Incremental stages: the records that arrived after the base snapshot join the release.

A stage takes the base result (standardised base records and their labels) and the
standardised increment, and returns labels for the union (base records first, then the
increment, in arrival order) in which every cell holds at least k records. Paper 001, Table 1:

| name | what |
|---|---|
| ``two_stage`` | an engine on the increment alone, cells united with the base cells (2MDAV) |
| ``nn`` | adjoin each new record to the nearest current centroid, which moves |
| ``nn_inertial`` | as ``nn``, choosing argmin n_q/(n_q+1) |y - x_q|^2 |
| ``nn_split_mid`` | as ``nn``, splitting a cell with MDAV as soon as it reaches 2k |
| ``nn_split_end`` | as ``nn``, then splitting every cell of 2k or more with MDAV |

Edge cases (specification section 5, docs/design/specification.md): an empty increment
returns the base labels; a base of fewer than 2k records is one cell at most, so the whole
union is microaggregated one-shot with MDAV (the small-base rule, :func:`base_is_usable`, which
the release and the service follow too); an increment smaller than k cannot form a cell of its
own, so ``two_stage`` adjoins it (``nn``).
"""

# Stages register themselves on import.
from streamanon.incremental import nn as _nn  # noqa: F401
from streamanon.incremental import two_stage as _two_stage  # noqa: F401
from streamanon.incremental.base import (
    LOSS_NU,
    StageFunction,
    StageInfo,
    available_stages,
    base_is_usable,
    get_stage,
    register_stage,
    run_stage,
    union_one_shot,
    unregister_stage,
)

__all__ = [
    "LOSS_NU",
    "StageFunction",
    "StageInfo",
    "available_stages",
    "base_is_usable",
    "get_stage",
    "register_stage",
    "run_stage",
    "union_one_shot",
    "unregister_stage",
]
