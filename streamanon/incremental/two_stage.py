"""Two-stage: microaggregate the increment on its own and unite the cells (paper 001, IV-A).

With the ``mdav`` engine this is 2MDAV. It costs the engine's time on the increment alone
(``tau_+ = nu^2`` for a quadratic engine) and never touches the base cells; the price is that
a new record cannot share a cell with a nearby base record, so the distortion grows with nu
(paper 001, Fig. 16; less so as m grows).
"""

from __future__ import annotations

import numpy as np

from streamanon.engines.base import run_engine
from streamanon.incremental.base import LOSS_NU, base_is_usable, register_stage, union_one_shot
from streamanon.incremental.nn import adjoin_increment


@register_stage(
    "two_stage",
    summary="engine on the increment alone, united with the base cells (2MDAV with mdav)",
    source="Rebollo-Monedero et al. 2018 (paper 001), sec. IV-A",
    parameters={"engine": "engine run on the increment (default mdav)",
                "engine_params": "parameters of that engine (dict, default none)"},
    # the loss it adds over the base engine's one-shot loss at the ratios LOSS_NU, over an
    # MDAV base (m = 15, k = 10, 50,000 Gaussian records); linear in between
    nu_grid=LOSS_NU,
    added_loss=(0.0, 0.0098, 0.0309, 0.0485, 0.0740, 0.0860, 0.0945, 0.0978, 0.0875, 0.0489,
                0.0489),
    # the increment's engine, MDAV by default whatever the base's; incremental = "auto"'s
    # second choice: it costs only the late records
    cost="engine_on_increment", auto_rank=1,
)
def two_stage(base: np.ndarray, base_labels: np.ndarray, increment: np.ndarray, k: int, *,
              engine: str = "mdav",
              engine_params: dict[str, object] | None = None) -> np.ndarray:
    """Labels of the union: base cells unchanged, the increment's own cells after them.

    An increment of fewer than k records cannot form a cell: it is adjoined to the nearest
    base cells instead (``nn``). A base of fewer than 2k records: one-shot on the union.
    """
    n0, n_plus = base.shape[0], increment.shape[0]
    if n_plus == 0:
        return base_labels.copy()
    if not base_is_usable(n0, k):
        return union_one_shot(base, increment, k, engine, engine_params)
    if n_plus < k:
        return adjoin_increment(base, base_labels, increment, k)
    own = run_engine(engine, increment, k, **(engine_params or {}))
    return np.concatenate([base_labels, own + int(base_labels.max()) + 1])
