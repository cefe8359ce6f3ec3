"""The engines' traits as the scheduler takes them: read from the engine registry, handed over
as plain data (:class:`scheduler.traits.EngineTraits`).

Each engine declares its traits where it registers (``streamanon.registry.Entry``); the
scheduler imports nothing of streamanon, so the service, ``streamanon simulate`` and
``streamanon plan`` build its values here and nowhere else. The registry is imported when a
trait is first asked for, so importing this module loads no engine.
"""

from __future__ import annotations

from scheduler.cost_model import PowerLaw
from scheduler.traits import EngineTraits, auto_engines

#: An engine registered without a provisional cost model is planned with this one's until it
#: is calibrated (seconds to minutes after a survey starts).
FALLBACK_COST_ENGINE = "mdav"


def engine_traits(name: str) -> EngineTraits:
    """Engine ``name``'s traits from its registry entry (a :class:`ParameterError` for an
    unknown engine)."""
    from streamanon.engines import get_engine

    entry = get_engine(name)
    cost = None if entry.cost_model is None else PowerLaw(a=entry.cost_model[0],
                                                          b=entry.cost_model[1])
    return EngineTraits(name=entry.name, one_shot_loss=entry.one_shot_loss, auto=entry.auto,
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


def provisional_model(engine: str, m: int, k: int) -> PowerLaw:
    """The base cost model of ``engine`` before it is calibrated: its declared one at width
    ``m`` and ``k`` (:meth:`EngineTraits.provisional`), else :data:`FALLBACK_COST_ENGINE`'s."""
    model = engine_traits(engine).provisional(m, k)
    if model is None:
        model = engine_traits(FALLBACK_COST_ENGINE).provisional(m, k)
    assert model is not None, f"{FALLBACK_COST_ENGINE} declares a provisional cost model"
    return model
