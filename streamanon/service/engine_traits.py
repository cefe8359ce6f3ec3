"""The engines' and the incremental stages' traits as the scheduler takes them: read from the
registries, handed over as plain data (:class:`scheduler.traits.EngineTraits`,
:class:`scheduler.traits.StageTraits`).

Each engine and each stage declares its traits where it registers (``streamanon.registry.Entry``:
``entry.engine``, ``entry.stage``); the scheduler imports nothing of streamanon, so the
service, ``streamanon simulate`` and ``streamanon plan`` build its values here and nowhere
else. The registries are imported when a trait is first asked for, so importing this module
loads no engine and no stage.
"""

from __future__ import annotations

from scheduler.cost_model import PowerLaw
from scheduler.traits import EngineTraits, StageTraits, auto_engines, auto_stages

#: An engine registered without a provisional cost model is planned with this one's until it
#: is calibrated (seconds to minutes after a survey starts).
FALLBACK_COST_ENGINE = "mdav"


def engine_traits(name: str) -> EngineTraits:
    """Engine ``name``'s traits from its registry entry (a :class:`ParameterError` for an
    unknown engine)."""
    from streamanon.engines import get_engine

    entry = get_engine(name)
    tags = entry.engine
    assert tags is not None, f"engine {name!r} is registered with its traits"
    cost = None if tags.cost_model is None else PowerLaw(a=tags.cost_model[0],
                                                         b=tags.cost_model[1])
    return EngineTraits(name=entry.name, one_shot_loss=tags.one_shot_loss, auto=tags.auto,
                        provisional_cost=cost)


def all_engine_traits() -> tuple[EngineTraits, ...]:
    """Every registered engine's traits, by name."""
    from streamanon.engines import available_engines

    return tuple(engine_traits(entry.name) for entry in available_engines())


def auto_engine_traits() -> tuple[EngineTraits, ...]:
    """What ``engine = "auto"`` chooses from, quality first
    (:func:`scheduler.traits.auto_engines` of the registered engines)."""
    return auto_engines(all_engine_traits())


def auto_engine_names() -> tuple[str, ...]:
    """The names of :func:`auto_engine_traits`."""
    return tuple(e.name for e in auto_engine_traits())


def stage_traits(name: str) -> StageTraits:
    """Incremental stage ``name``'s traits from its registry entry (a :class:`ParameterError`
    naming the registered stages for an unknown one: no stage is priced as another)."""
    from streamanon.incremental import get_stage

    entry = get_stage(name)
    tags = entry.stage
    assert tags is not None, f"stage {name!r} is registered with its traits"
    return StageTraits(name=entry.name, nu_grid=tags.nu_grid, added_loss=tags.added_loss,
                       cost=tags.cost, auto_rank=tags.auto_rank)


def all_stage_traits() -> tuple[StageTraits, ...]:
    """Every registered stage's traits, by name."""
    from streamanon.incremental import available_stages

    return tuple(stage_traits(entry.name) for entry in available_stages())


def auto_stage_traits() -> tuple[StageTraits, ...]:
    """What ``incremental = "auto"`` chooses from, in order of preference
    (:func:`scheduler.traits.auto_stages` of the registered stages)."""
    return auto_stages(all_stage_traits())


def auto_stage_names() -> tuple[str, ...]:
    """The names of :func:`auto_stage_traits`."""
    return tuple(s.name for s in auto_stage_traits())


def provisional_model(engine: str, m: int, k: int) -> PowerLaw:
    """The base cost model of ``engine`` before it is calibrated: its declared one at width
    ``m`` and ``k`` (:meth:`EngineTraits.provisional`), else :data:`FALLBACK_COST_ENGINE`'s."""
    model = engine_traits(engine).provisional(m, k)
    if model is None:
        model = engine_traits(FALLBACK_COST_ENGINE).provisional(m, k)
    assert model is not None, f"{FALLBACK_COST_ENGINE} declares a provisional cost model"
    return model
