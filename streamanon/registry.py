"""A name -> function registry, shared by the engines and the incremental stages.

Each entry carries the traits of its kind in a group of its own, as scikit-learn's ``Tags``
carry ``classifier_tags`` or ``transformer_tags``: an engine's on :class:`EngineTags`
(``Entry.engine``), a stage's on :class:`StageTags` (``Entry.stage``). An engine entry has no
stage group and a stage entry no engine group.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamanon.errors import ParameterError

Function = Callable[..., Any]

#: How the planner prices an incremental stage (:attr:`StageTags.cost`): ``engine_on_increment``
#: runs an engine on the increment alone (2MDAV: ``t(n_+)``); ``nearest_neighbour`` adjoins
#: each late record to a base cell (``c n_0 n_+ / k``); ``nearest_neighbour_split`` adjoins and
#: then splits the cells that grew to 2k with an engine (that engine's cost on the grown cells
#: added). The scheduler's copy is ``scheduler.cost_model.STAGE_COSTS`` (neither floor imports
#: the other; ``tests/test_stage_traits.py`` checks that the two are equal).
STAGE_COSTS = ("engine_on_increment", "nearest_neighbour", "nearest_neighbour_split")


@dataclass(frozen=True)
class EngineTags:
    """An engine's traits, what the service and the planner know of it without running it (the
    defaults are the cautious ones):

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

    mixed: bool = False
    one_shot_loss: float = 1.0
    cost_model: tuple[float, float] | None = None
    auto: bool = False
    warmup: Callable[[Any], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if not self.one_shot_loss > 0:
            raise ValueError("one_shot_loss must be > 0")
        if self.cost_model is not None and not (self.cost_model[0] > 0
                                                and self.cost_model[1] > 0):
            raise ValueError("cost_model (a, b) must be positive")


@dataclass(frozen=True)
class StageTags:
    """An incremental stage's traits, what the planner knows of it without running it:

    - ``nu_grid`` and ``added_loss``: its loss curve, the information loss it adds over its
      base engine's one-shot loss at each ratio nu of the grid (linear in between), as
      measured (the planner's quality model, :mod:`scheduler.quality`).
    - ``cost``: how the planner prices it, one of :data:`STAGE_COSTS`.
    - ``auto_rank``: ``incremental = "auto"`` may pick it, in this order of preference
      among the stages that declare one (lower first: the better quality, which the choice
      keeps among plans of equal loss); None: it never picks it.
    """

    nu_grid: tuple[float, ...]
    added_loss: tuple[float, ...]
    cost: str
    auto_rank: int | None = None

    def __post_init__(self) -> None:
        nu, loss = self.nu_grid, self.added_loss
        if len(nu) < 2 or len(nu) != len(loss):
            raise ValueError("nu_grid and added_loss must have the same length, two or more")
        if not (0.0 <= nu[0] and nu[-1] <= 1.0
                and all(a < b for a, b in itertools.pairwise(nu))):
            raise ValueError("nu_grid must increase within [0, 1]")
        if not all(math.isfinite(x) for x in loss):
            raise ValueError("added_loss must be finite")
        if self.cost not in STAGE_COSTS:
            raise ValueError(f"cost must be one of {', '.join(STAGE_COSTS)}, got {self.cost!r}")
        if self.auto_rank is not None and not (isinstance(self.auto_rank, int)
                                               and self.auto_rank >= 0):
            raise ValueError(f"auto_rank must be None or an integer >= 0, got "
                             f"{self.auto_rank!r}")


@dataclass(frozen=True)
class Entry:
    """A registered function: its name, one-line summary, source and parameters, and the
    traits of its kind (``engine`` for an engine, ``stage`` for a stage; the other is None).

    ``per_record`` names the parameters that hold one value per record (a class label, the
    confidential attributes): callers pass them as data columns and slice them with the rows.
    ``runtime`` names those that say how to run, not what to compute (where the parts of a
    partitioned run go): they never select a cost model, and they are Python objects that
    the caller passes in, not settings of a configuration file.

    The traits are read in their group (``entry.engine.one_shot_loss``,
    ``entry.stage.added_loss``), so that nothing reads an engine's trait off a stage.
    """

    name: str
    function: Function
    summary: str
    source: str
    parameters: dict[str, str] = field(default_factory=dict)
    per_record: frozenset[str] = frozenset()
    runtime: frozenset[str] = frozenset()
    engine: EngineTags | None = None
    stage: StageTags | None = None


class Registry:
    """Functions registered by name; ``kind`` names them in error messages, ``group`` is
    the traits group its entries carry (``"engine"`` or ``"stage"``)."""

    def __init__(self, kind: str, group: str) -> None:
        if group not in ("engine", "stage"):
            raise ValueError(f"group must be 'engine' or 'stage', got {group!r}")
        self.kind = kind
        self.group = group
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, *, summary: str, source: str,
                 parameters: dict[str, str] | None = None,
                 per_record: tuple[str, ...] = (),
                 runtime: tuple[str, ...] = (),
                 traits: EngineTags | StageTags,
                 ) -> Callable[[Function], Function]:
        """Decorator that adds a function under ``name``, with the ``traits`` of this
        registry's group (:class:`EngineTags` or :class:`StageTags`)."""
        expected = EngineTags if self.group == "engine" else StageTags
        if not isinstance(traits, expected):
            raise TypeError(f"{self.kind} {name!r}: its traits must be {expected.__name__}, "
                            f"got {type(traits).__name__}")

        def decorate(function: Function) -> Function:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = Entry(
                name, function, summary, source, dict(parameters or {}), frozenset(per_record),
                frozenset(runtime), **{self.group: traits})
            return function

        return decorate

    def unregister(self, name: str) -> None:
        """Remove ``name`` (a test's engine or stage, registered for the test alone)."""
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
