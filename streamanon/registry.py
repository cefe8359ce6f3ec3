"""A name -> function registry, shared by the engines and the incremental stages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamanon.errors import ParameterError

Function = Callable[..., Any]


@dataclass(frozen=True)
class Entry:
    """A registered function: its name, one-line summary, source and parameters.

    ``per_record`` names the parameters that hold one value per record (a class label, the
    confidential attributes): callers pass them as data columns and slice them with the rows.
    ``runtime`` names those that say how to run, not what to compute (where the parts of a
    partitioned run go): they never select a cost model, and they are Python objects that
    the caller passes in, not settings of a configuration file.

    An engine's traits, what the service and the planner know of it without running it (the
    defaults are the cautious ones; a stage leaves them unset):

    - ``mixed``: it works on the Euclidean embedding of nominal data
      (:mod:`streamanon.mixed`), using distances and centroids only; an engine that cuts
      single coordinates (one indicator column is one level, not the attribute) does not.
    - ``one_shot_loss``: its one-shot information loss relative to MDAV's on the same
      records, as measured (the planner's quality model, :mod:`scheduler.quality`).
    - ``cost_model``: ``(a, b)`` of its provisional cost model ``t = a n^b`` seconds at
      m = 15 and k = 10, the reference machine's fit, used until the engine is calibrated
      where it runs; None takes MDAV's.
    - ``auto``: ``engine = "auto"`` may choose it (it needs no parameter and no per-record
      input).
    - ``warmup``: the parameters of a small run that compiles every kernel it uses, given
      that run's records (:mod:`streamanon.warmup`); None runs it with its defaults.
    """

    name: str
    function: Function
    summary: str
    source: str
    parameters: dict[str, str] = field(default_factory=dict)
    per_record: frozenset[str] = frozenset()
    runtime: frozenset[str] = frozenset()
    mixed: bool = False
    one_shot_loss: float = 1.0
    cost_model: tuple[float, float] | None = None
    auto: bool = False
    warmup: Callable[[Any], dict[str, Any]] | None = None


class Registry:
    """Functions registered by name; ``kind`` names them in error messages."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, *, summary: str, source: str,
                 parameters: dict[str, str] | None = None,
                 per_record: tuple[str, ...] = (),
                 runtime: tuple[str, ...] = (), mixed: bool = False,
                 one_shot_loss: float = 1.0, cost_model: tuple[float, float] | None = None,
                 auto: bool = False,
                 warmup: Callable[[Any], dict[str, Any]] | None = None,
                 ) -> Callable[[Function], Function]:
        """Decorator that adds a function under ``name``, with its traits (:class:`Entry`)."""
        if not one_shot_loss > 0:
            raise ValueError(f"{self.kind} {name!r}: one_shot_loss must be > 0")
        if cost_model is not None and not (cost_model[0] > 0 and cost_model[1] > 0):
            raise ValueError(f"{self.kind} {name!r}: cost_model (a, b) must be positive")

        def decorate(function: Function) -> Function:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = Entry(
                name, function, summary, source, dict(parameters or {}), frozenset(per_record),
                frozenset(runtime), mixed=mixed, one_shot_loss=float(one_shot_loss),
                cost_model=None if cost_model is None else (float(cost_model[0]),
                                                            float(cost_model[1])),
                auto=auto, warmup=warmup)
            return function

        return decorate

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's engine, registered for the test alone)."""
        del self._entries[name]

    def all(self) -> list[Entry]:
        """Every entry, sorted by name."""
        return [self._entries[name] for name in sorted(self._entries)]

    def get(self, name: str) -> Entry:
        """The entry ``name``; a :class:`ParameterError` lists the known names."""
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(sorted(self._entries))
            raise ParameterError(
                f"unknown {self.kind} {name!r}; available {self.kind}s: {known}") from None

    def check_parameters(self, name: str, params: dict[str, Any],
                         always: frozenset[str] = frozenset()) -> Entry:
        """The entry, after checking that ``params`` are all parameters it accepts."""
        entry = self.get(name)
        unknown = sorted(set(params) - set(entry.parameters) - always)
        if unknown:
            accepted = ", ".join(sorted(entry.parameters)) or "none"
            raise ParameterError(f"{self.kind} {name!r} has no parameter {', '.join(unknown)}; "
                                 f"accepted: {accepted}")
        return entry
