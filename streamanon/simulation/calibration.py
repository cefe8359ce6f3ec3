"""The cost models a simulation and the demo plan with, kept in their output folder.

``streamanon simulate`` and ``streamanon demo`` (:mod:`streamanon.simulation.simulate`,
:mod:`streamanon.simulation.demo`) plan their surveys up front as the service will live: with its
base engine's model, calibrated in ``OUT/cost_models.json`` when missing and timed up to near
the base run's size (:func:`extend_calibration`), and with the candidate incremental stages'
models (:func:`candidates`), timed here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scheduler.choice import Option
from scheduler.cost_model import CostModelStore, calibrate, incremental_cost_model, time_engine
from streamanon.engines import get_engine, run_engine
from streamanon.incremental import run_stage
from streamanon.service.engine_traits import auto_stage_traits, engine_traits, stage_traits
from streamanon.service.machine import load_meter
from streamanon.service.planning import EXTEND_REACH

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def calibrated_model(out: Path, engine: str, m: int, k: int,
                     progress: Progress = log.info) -> Any:
    """The engine's cost model for (m, k) in ``out/cost_models.json``, calibrated when missing."""

    store = CostModelStore(out / "cost_models.json")
    model = store.get(engine, m, k)
    if model is None:
        progress(f"calibrating the {engine} cost model at m = {m}, k = {k} (the first run on a "
                 "machine also compiles the kernels, about 40 s) ...")
        function = get_engine(engine).function
        model = store.put(engine, m, k, calibrate(function, m, k, budget_seconds=8.0,
                                                  meter=load_meter))
    return model


def store_reach(out: Path, engine: str, m: int, k: int) -> int:
    """The largest size ``engine`` was calibrated at in ``out/cost_models.json`` (0: none)."""
    return CostModelStore(out / "cost_models.json").largest_calibrated(engine, m, k)


def extend_calibration(out: Path, engine: str, m: int, k: int, target: float,
                       budget_seconds: float, progress: Progress = log.info,
                       model: Any = None) -> Any:
    """Time ``engine`` at doubling sizes beyond its calibration until the largest timed size
    is within :data:`~streamanon.service.planning.EXTEND_REACH` of ``target`` records (the
    base run the scenario plans), while the next timing is predicted to fit in what is left
    of ``budget_seconds``; each timing is a calibration sample of ``out/cost_models.json``.
    Returns the refitted model (``model`` when nothing was timed or stored).

    A calibration of a few seconds times the engine on tens of thousands of records, and an
    engine's cost grows more steeply once the data leave the caches: MDAV calibrated up to
    80,000 records predicted 46.85 s for a million and took 84.60 s."""
    store = CostModelStore(out / "cost_models.json")
    stored = store.get(engine, m, k)
    spent = 0.0
    while stored is not None:
        model = stored
        largest = store.largest_calibrated(engine, m, k)
        n = 2 * largest
        if not largest or largest * EXTEND_REACH >= target or model(n) > budget_seconds - spent:
            break
        progress(f"      timing {engine} on {n:,} records, nearer the base run's "
                 f"{target:,.0f} (about {model(n):.0f} s by the model so far) ...")
        timing = time_engine(get_engine(engine).function, m, k, n, meter=load_meter)
        spent += timing.seconds
        stored = store.extend(engine, m, k, n, timing.seconds, slowdown=timing.slowdown)
    return model


def stage_model(incremental: str, base: Any, m: int, k: int, split: Any = None) -> Any:
    """The cost model of the ``incremental`` stage after a base engine whose model is
    ``base`` (:func:`scheduler.cost_model.incremental_cost_model`, priced by the stage's
    traits; timed here, a second or two)."""
    return incremental_cost_model(
        stage_traits(incremental), base, m, k, partition=functools.partial(run_engine, "mdav"),
        run_stage=functools.partial(run_stage, incremental), split=split)


def candidates(models: dict[str, Any], incremental: str, m: int, k: int,
               split: Any = None) -> list[Option]:
    """The planner's candidates (:func:`scheduler.choice.choose`): every engine of ``models``
    with the ``incremental`` stage, or with each of the stages ``incremental = "auto"`` picks
    from (:func:`~streamanon.service.engine_traits.auto_stage_traits`) when it is
    ``"auto"``."""
    stages = auto_stage_traits() if incremental == "auto" else (None,)
    return [Option(engine_traits(engine), model,
                   stage_model(incremental if stage is None else stage.name, model, m, k,
                               split), stage)
            for engine, model in models.items() for stage in stages]
