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
    """

    name: str
    function: Function
    summary: str
    source: str
    parameters: dict[str, str] = field(default_factory=dict)
    per_record: frozenset[str] = frozenset()
    runtime: frozenset[str] = frozenset()


class Registry:
    """Functions registered by name; ``kind`` names them in error messages."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, *, summary: str, source: str,
                 parameters: dict[str, str] | None = None,
                 per_record: tuple[str, ...] = (),
                 runtime: tuple[str, ...] = ()) -> Callable[[Function], Function]:
        """Decorator that adds a function under ``name``."""

        def decorate(function: Function) -> Function:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = Entry(name, function, summary, source,
                                        dict(parameters or {}), frozenset(per_record),
                                        frozenset(runtime))
            return function

        return decorate

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
