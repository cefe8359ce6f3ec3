"""Cost models for the planner, their calibration, and their persistence.

The base engine's time is modelled as a power law ``t = a n^b`` at the survey's m and k. MDAV is
quadratic in theory (b = 2), but measured exponents differ (streamanon's MDAV fits well below
2; the MDAV benchmark page has the figures), so ``b`` is fitted. A fit also gives a prediction
interval (:meth:`PowerLaw.upper`): from its own residual, wider away from the calibrated sizes, and
from the scatter of the real runs, whose measured slow-down against the calibration (the
contention of the cores shared with the broker and the collector) scales the model
(:meth:`PowerLaw.observed`). The incremental stages have their own models:
nearest-neighbour adjoining costs ``c n_0 n_+ / k`` and a two-stage run costs the engine's power
law on the increment alone.

:func:`calibrate` times an engine on synthetic data at a few sizes within a small time budget;
:func:`incremental_cost_model` times an incremental stage once; :class:`CostModelStore` keeps
the samples in a JSON file and refits whenever a real run adds one. Nothing here imports the
service or the engines: the engine and the stage are passed in as functions.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from scheduler.overhead import DEFAULT_OVERHEAD, ReleaseOverhead

#: The entry of :class:`CostModelStore` that keeps the recent releases' close steps.
RELEASES_KEY = "release_steps"

#: How an incremental stage is priced (its trait ``cost``, :class:`scheduler.traits.StageTraits`):
#: ``engine_on_increment`` is :class:`TwoStageCost` (an engine on the increment alone, 2MDAV);
#: ``nearest_neighbour`` is :class:`NearestNeighbourCost` (``c n_0 n_+ / k``) and
#: ``nearest_neighbour_split`` the same with the splitting engine's term. The core's copy, which
#: the stages declare, is ``streamanon.registry.STAGE_COSTS`` (neither floor imports the other;
#: ``tests/test_stage_traits.py`` checks that the two are equal).
STAGE_COSTS = ("engine_on_increment", "nearest_neighbour", "nearest_neighbour_split")

#: :meth:`PowerLaw.fit_upper`: the sizes within this factor of the largest are fitted.
UPPER_SPAN = 4.0

#: The prior on an engine's timing noise that :meth:`PowerLaw.log_spread` pools with a fit's
#: residual: a standard deviation of 10 % in log space, worth :data:`PRIOR_DOF` timings. A fit
#: on three sizes has one degree of freedom, and alone its 95 % bound took a t quantile of
#: 6.3: 4.3 times the prediction for MDAV at 200,000 records on a residual of 0.108 (its runs
#: scatter within 1.5x of a model calibrated at their size). Pooled, the bound is
#: Student's with ``N - 2 + PRIOR_DOF`` degrees of freedom on the pooled variance (a
#: conjugate scaled inverse chi-squared prior).
PRIOR_NOISE = 0.1
PRIOR_DOF = 4


@dataclass(frozen=True)
class PowerLaw:
    """``seconds(n) = a * n**b``, fitted by least squares in log space, with what its
    prediction interval needs.

    ``residual`` is the RMS error of the fit in log space (0.1 means the fitted points are
    typically within about 10 %). ``points``, ``log_n_mean`` and ``log_n_ss`` describe the sizes
    fitted (how many samples, the mean of ``log n`` and the sum of squared deviations from it):
    a prediction far from the calibrated sizes is less certain than one among them. ``points``
    is 0 when they are unknown (a model saved before they were kept, or made by hand).

    ``contention`` is how much slower the engine ran in real runs than the calibration fit
    predicts (the geometric mean of ``measured / predicted`` over ``runs`` recent runs, see
    :meth:`observed`); it is already folded into ``a``, so ``model(n)`` predicts a real run.
    ``contention_spread`` is the standard deviation of those log ratios (0 with fewer than two
    runs).
    """

    a: float
    b: float
    residual: float = 0.0
    points: int = 0
    log_n_mean: float = 0.0
    log_n_ss: float = 0.0
    contention: float = 1.0
    runs: int = 0
    contention_spread: float = 0.0

    def __call__(self, n: float) -> float:
        return self.a * float(n) ** self.b if n > 0 else 0.0

    @classmethod
    def fit(cls, ns: Sequence[float], seconds: Sequence[float]) -> PowerLaw:
        """Least squares on ``log t = log a + b log n``."""
        x = np.log(np.asarray(ns, dtype=float))
        y = np.log(np.asarray(seconds, dtype=float))
        if x.size < 2 or np.ptp(x) == 0:
            raise ValueError("need timings at two or more distinct sizes to fit a power law")
        b, log_a = np.polyfit(x, y, 1)
        residual = float(np.sqrt(np.mean((y - (log_a + b * x)) ** 2)))
        return cls(a=float(math.exp(log_a)), b=float(b), residual=residual, points=int(x.size),
                   log_n_mean=float(x.mean()), log_n_ss=float(np.sum((x - x.mean()) ** 2)))

    @classmethod
    def fit_upper(cls, ns: Sequence[float], seconds: Sequence[float],
                  span: float = UPPER_SPAN) -> PowerLaw:
        """:meth:`fit` on the samples within a factor ``span`` of the largest size (at least
        the three largest sizes): the model is used upward, at base runs larger than any
        sample, and an engine's exponent grows with n (once the data leave the caches, MDAV's
        went from about 1.3 below 50,000 records to about 2 above 200,000), so the small sizes
        would pull the extrapolation down."""
        sizes = sorted(set(ns))
        floor = min(max(sizes) / span, sizes[-3] if len(sizes) >= 3 else sizes[0])
        kept = [(n, t) for n, t in zip(ns, seconds, strict=True) if n >= floor]
        return cls.fit(*zip(*kept, strict=True))

    @classmethod
    def quadratic(cls, t_ref: float, n: float) -> PowerLaw:
        """The textbook MDAV model through one point: ``t_ref`` seconds for ``n`` records."""
        return cls(a=t_ref / float(n) ** 2, b=2.0)

    def observed(self, runs: Sequence[tuple[float, float]]) -> PowerLaw:
        """This (calibration) fit under the conditions of real ``runs`` of ``(n, seconds)``:
        ``a`` times the measured contention, the geometric mean of ``seconds / self(n)``.

        Calibration times the engine alone; a real base run shares the cores with the broker,
        the collector and the producer, so it is slower than calibrated by a factor that
        only the real runs tell. The ratio is assumed not to depend on n. No runs: the
        model itself.
        """
        ratios = np.log([seconds / self(n) for n, seconds in runs if n > 0 and seconds > 0])
        if ratios.size == 0:
            return self
        spread = float(np.std(ratios, ddof=1)) if ratios.size > 1 else 0.0
        contention = float(math.exp(ratios.mean()))
        return replace(self, a=self.a * contention, contention=self.contention * contention,
                       runs=int(ratios.size), contention_spread=spread)

    def on_work_share(self, share: float) -> PowerLaw:
        """This model for records of which the engine runs on ``share`` only: ``a (share
        n)^b`` at ``n`` records, with its prediction interval taken at ``share n``.

        Survey keys repeat: the distinct-tuple microaggregation runs the engine on the
        respondents of rare tuples only (a million people over 2,000 tuples: a few thousand
        of them), so a survey whose records have been seen is planned as the problem it is.
        ``share`` 1 (or more): the model itself.

        >>> m = PowerLaw(a=1e-9, b=2.0)
        >>> round(m.on_work_share(0.01)(1_000_000), 6), m.on_work_share(1.0) is m
        (0.1, True)
        """
        if not share < 1:
            return self
        share = max(float(share), 1e-9)
        return replace(self, a=self.a * share ** self.b,
                       log_n_mean=self.log_n_mean - math.log(share))

    def log_spread(self, n: float) -> float:
        """The standard error of a new run's ``log seconds`` at ``n`` records.

        The textbook prediction interval of a linear regression (here ``log t`` on ``log n``):
        ``s^2 (1 + 1/N + (log n - mean)^2 / SS)``, so it widens away from the calibrated
        sizes, with ``s^2`` the fit's squared errors ``N residual^2`` pooled with the prior on
        the timing noise (:data:`PRIOR_NOISE` worth :data:`PRIOR_DOF` timings) over
        ``N - 2 + PRIOR_DOF`` degrees of freedom.
        With real runs behind ``contention``, a new run scatters like those runs (never less
        than the calibration does) and the measured contention, a mean of ``runs`` ratios, is
        uncertain by that scatter over ``sqrt(runs)``. A model without fit statistics
        (``points`` = 0) uses its ``residual`` alone.
        """
        if self.points <= 0:
            return self.residual
        # the fit's squared errors and the prior's, over their degrees of freedom together
        fit_dof = max(self.points - 2, 0)
        s2 = ((self.residual**2 * self.points + PRIOR_DOF * PRIOR_NOISE**2)
              / (fit_dof + PRIOR_DOF))
        leverage = 1.0 / self.points
        if self.log_n_ss > 0 and n > 0:
            leverage += (math.log(n) - self.log_n_mean) ** 2 / self.log_n_ss
        run2 = max(self.contention_spread**2, s2)
        variance = s2 * leverage + run2 * (1.0 + (1.0 / self.runs if self.runs else 0.0))
        return math.sqrt(variance)

    @property
    def degrees_of_freedom(self) -> int | None:
        """Of the spread's estimate: ``N - 2`` for the fit, plus ``runs - 1`` with a measured
        contention spread; None when unknown (``points`` = 0: a normal quantile is used)."""
        if self.points <= 0:
            return None
        return max(self.points - 2, 0) + PRIOR_DOF + max(self.runs - 1, 0)

    def upper(self, n: float, quantile: float = 0.95) -> float:
        """The ``quantile`` upper bound of a new run's seconds at ``n`` records:
        ``self(n) * exp(q * log_spread(n))``, ``q`` the Student t quantile (normal when the
        degrees of freedom are unknown). A model with no spread gives ``self(n)``."""
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
        spread = self.log_spread(n)
        if spread <= 0:
            return self(n)
        dof = self.degrees_of_freedom
        from scipy import stats  # here: 0.7 s to import, and recording a run's time needs none

        q = stats.norm.ppf(quantile) if not dof else stats.t.ppf(quantile, dof)
        return self(n) * math.exp(float(q) * spread)

    def to_dict(self) -> dict[str, float]:
        """The fields as JSON numbers (what :class:`CostModelStore` keeps)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PowerLaw:
        """A model from :meth:`to_dict`; the fields a file written before them lacks take
        their defaults (no fit statistics, no contention), so old files still load."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


@dataclass(frozen=True)
class TwoStageCost:
    """Incremental stage that runs an engine on the increment alone (2MDAV): ``engine(n_+)``."""

    engine: PowerLaw

    def __call__(self, n_base: float, n_increment: float) -> float:
        return self.engine(n_increment)

    def spanned(self, n_base: float, n_increment: float) -> float:
        """The records in the cells the stage makes or changes: the increment's own cells
        only (every base cell stays as it was, and its part of a base release made before
        close is reused: ``streamanon.splicing``)."""
        return max(float(n_increment), 0.0)


@dataclass(frozen=True)
class NearestNeighbourCost:
    """Incremental stage that adjoins each new record to a base cell: ``c n_0 n_+ / k``
    (paper 001, sec. IV-D: proportional to the number of centroids times new records).

    With ``split`` (the splitting engine's cost model, for ``nn_split_mid``/``nn_split_end``)
    the cells that grew past ``2k`` are split too: the ``n_0 / k`` cells hold
    ``k (n_0 + n_+) / n_0`` records on average, and splitting each costs ``split`` of that
    size. Negligible for a small increment, this term is what makes a tiny base expensive: with
    ``n_0 -> k`` it tends to one engine run on all records, which the adjoin term alone
    (``-> 0``) would hide from the planner.
    """

    c: float
    k: int
    split: PowerLaw | None = None

    def __call__(self, n_base: float, n_increment: float) -> float:
        adjoin = self.c * n_base * n_increment / self.k
        if self.split is None or n_increment <= 0 or n_base <= 0:
            return adjoin
        cells = max(n_base / self.k, 1.0)
        size = (n_base + n_increment) / cells
        if size < 2 * self.k:
            return adjoin
        return adjoin + cells * self.split(size)

    def spanned(self, n_base: float, n_increment: float) -> float:
        """The records in the cells the stage changes: the new records and the members of
        every base cell one of them joins. Each joins one of the ``n_0 / k`` base cells, so
        a cell is left as it was with probability ``exp(-n_+ k / n_0)`` (Poisson): at 200,000
        records, k = 10 and 6,000, 14,000 and 28,000 late records NN-split-end left 73.5 %,
        47.5 % and 20.5 % of the base records in unchanged cells, where this gives 73.4 %,
        47.1 % and 19.1 %. Those records are gated and serialised again at close."""
        late = max(float(n_increment), 0.0)
        if n_base <= 0:
            return late
        return late + n_base * -math.expm1(-late * self.k / n_base)



class PricedStage(Protocol):
    """What the cost models read of an incremental stage: how it is priced, one of
    :data:`STAGE_COSTS` (:class:`scheduler.traits.StageTraits` is one; it imports this
    module, so this one names it only here)."""

    @property
    def cost(self) -> str: ...


def stage_cost_model(stage: PricedStage, base: PowerLaw, k: int, c: float,
                     split: PowerLaw | None = None) -> TwoStageCost | NearestNeighbourCost:
    """The cost model of incremental ``stage`` (its traits) after ``base`` with the
    nearest-neighbour coefficient ``c`` (seconds, ``c n_0 n_+ / k``; unused by a stage priced
    ``engine_on_increment``). ``split`` as in :func:`incremental_cost_model`."""
    if stage.cost not in STAGE_COSTS:
        raise ValueError(f"unknown stage cost {stage.cost!r}; known: {', '.join(STAGE_COSTS)}")
    if stage.cost == "engine_on_increment":
        # the increment's engine: MDAV by default, whatever the base's
        return TwoStageCost(split or base)
    return NearestNeighbourCost(c=c, k=k, split=(split or base)
                                if stage.cost == "nearest_neighbour_split" else None)


def incremental_cost_model(
    stage: PricedStage,
    base: PowerLaw,
    m: int,
    k: int,
    *,
    partition: Callable[[np.ndarray, int], Any],
    run_stage: Callable[[np.ndarray, np.ndarray, np.ndarray, int], Any],
    clock: Callable[[], float] = time.perf_counter,
    split: PowerLaw | None = None,
) -> TwoStageCost | NearestNeighbourCost:
    """The cost model of incremental ``stage`` (its traits: how it is priced, ``stage.cost``)
    with ``base`` the base engine's model.

    A stage priced ``engine_on_increment`` (``two_stage``, 2MDAV) costs the base engine on the
    increment: :class:`TwoStageCost`. The nearest-neighbour stages cost ``c n_0 n_+ / k``
    (:class:`NearestNeighbourCost`, with the splitting term for those priced
    ``nearest_neighbour_split``: ``nn_split_mid`` and ``nn_split_end``), ``c`` timed here on one
    synthetic run and multiplied by the contention measured on the base engine's real runs
    (``base.contention``): ``partition(X, k)`` (MDAV) labels a Gaussian base of ``max(20 k, 20000)``
    records and ``run_stage(base, base_labels, increment, k)`` adjoins ``max(k, 2000)`` more.
    Like :func:`calibrate`, the engine and the stage are passed in, so nothing here imports them.
    ``split`` is the model of the engine that splits the grown cells, or with ``two_stage``
    runs on the increment (the stage's ``engine`` parameter, MDAV by default); None takes
    ``base``.
    """
    if stage.cost == "engine_on_increment":
        return stage_cost_model(stage, base, k, 0.0, split)
    rng = np.random.default_rng(1)
    n0, n_plus = max(20 * k, 20_000), max(k, 2_000)
    Z = rng.standard_normal((n0 + n_plus, m))
    labels = partition(Z[:n0], k)
    seconds = math.inf
    for _ in range(2):  # the first run also loads the compiled kernels: keep the faster
        started = clock()
        run_stage(Z[:n0], labels, Z[n0:], k)
        seconds = min(seconds, clock() - started)
    # timed here like the calibration, the stage shares the cores of a real run like the base
    # engine: the contention measured on the base engine's runs applies to it too
    return stage_cost_model(stage, base, k, seconds * k / (n0 * n_plus) * base.contention,
                            split)


#: A load meter: called when a timing starts, it returns the function that, called when the
#: timing ends, gives how many times slower than on a quiet machine the timing ran because of
#: the other work on the machine meanwhile (1: none). The service's is
#: :func:`streamanon.service.machine.load_meter`; without one every timing counts as quiet.
LoadMeter = Callable[[], Callable[[], float]]


def _quiet() -> Callable[[], float]:
    return lambda: 1.0


@dataclass(frozen=True)
class Calibration:
    """A fitted model and the (n, seconds) samples behind it. ``seconds`` are what the
    timing would have taken on a quiet machine: the measured seconds over the slow-down that
    the load meter measured meanwhile, kept in ``slowdowns`` (1 each without a meter)."""

    model: PowerLaw
    samples: list[tuple[int, float]] = field(default_factory=list)
    slowdowns: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Timing:
    """One timing of an engine (:func:`time_engine`): the measured ``seconds`` and the
    ``slowdown`` the load meter measured meanwhile; ``quiet`` is what it would have taken on a
    quiet machine."""

    seconds: float
    slowdown: float = 1.0

    @property
    def quiet(self) -> float:
        return self.seconds / self.slowdown


def _timed(engine: Callable[[np.ndarray, int], Any], X: np.ndarray, k: int,
           clock: Callable[[], float], meter: LoadMeter) -> Timing:
    stop = meter()
    started = clock()
    engine(X, k)
    seconds = max(clock() - started, 1e-9)
    return Timing(seconds, max(float(stop()), 1.0))


def calibrate(
    engine: Callable[[np.ndarray, int], Any],
    m: int,
    k: int,
    *,
    budget_seconds: float = 5.0,
    first_n: int | None = None,
    max_n: int = 2_000_000,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
    meter: LoadMeter = _quiet,
) -> Calibration:
    """Time ``engine(X, k)`` on standard Gaussian data with ``m`` columns at doubling sizes.

    Starts at ``first_n`` (default ``max(2000, 50 k)``) and doubles while the next run is
    predicted to fit in what is left of ``budget_seconds``; at least three sizes are timed. A
    tiny warm-up run first keeps compilation out of the timings. Each timing is taken as the
    quiet machine's (its seconds over the slow-down ``meter`` measured meanwhile), so that a
    calibration made while other work ran does not price later plans on a quiet machine.
    """
    rng = np.random.default_rng(seed)
    engine(rng.standard_normal((max(3 * k, 8), m)), k)  # warm-up: compile, load caches
    n = first_n or max(2000, 50 * k)
    samples: list[tuple[int, float]] = []
    slowdowns: list[float] = []
    spent = 0.0
    while True:
        timing = _timed(engine, rng.standard_normal((n, m)), k, clock, meter)
        seconds = timing.seconds
        samples.append((n, timing.quiet))
        slowdowns.append(timing.slowdown)
        spent += seconds
        growth = 2.0 ** (PowerLaw.fit(*zip(*samples, strict=True)).b if len(samples) > 1 else 2.0)
        next_n = 2 * n
        if next_n > max_n or (len(samples) >= 3 and spent + seconds * growth > budget_seconds):
            break
        n = next_n
    ns, ts = zip(*samples, strict=True)
    return Calibration(model=PowerLaw.fit_upper(ns, ts), samples=samples, slowdowns=slowdowns)


def time_engine(engine: Callable[[np.ndarray, int], Any], m: int, k: int, n: int, *,
                seed: int = 0, clock: Callable[[], float] = time.perf_counter,
                meter: LoadMeter = _quiet) -> Timing:
    """One ``engine(X, k)`` run on ``n`` x ``m`` standard Gaussian data, timed as
    :func:`calibrate` times it (after a tiny warm-up run, with ``meter``'s slow-down)."""
    rng = np.random.default_rng(seed)
    engine(rng.standard_normal((max(3 * k, 8), m)), k)
    return _timed(engine, rng.standard_normal((n, m)), k, clock, meter)


def default_store_path() -> Path:
    """``$STREAMANON_DATA_DIR/cost_models.json``, default ``~/.local/share/streamanon/``."""
    base = os.environ.get("STREAMANON_DATA_DIR") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "streamanon"
    )
    return Path(base) / "cost_models.json"


class CostModelStore:
    """Fitted cost models by (engine, its parameters, m, k), kept in a JSON file. Which
    parameters select a model is the caller's choice (the service and the CLI pass
    :func:`streamanon.engines.model_parameters`); none is the engine's defaults.

    Each entry keeps its calibration samples and up to ``max_runs`` timings of real runs;
    :meth:`observe` adds a real run and refits, so the model follows the machine it runs on.
    The file also keeps the close steps of the ``max_releases`` most recent releases
    (:meth:`observe_release`), to which the release overhead the planner weighs is scaled
    (:meth:`release_overhead`).
    The power law is fitted on the calibration samples (sizes chosen for the fit, timed alone)
    and scaled by the contention measured on the ``contention_runs`` most recent real runs
    (:meth:`PowerLaw.observed`); with calibration samples at fewer than two sizes it is fitted
    on every sample. An entry without fit statistics (a file of an older version) loads with
    the defaults of :meth:`PowerLaw.from_dict`.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, max_runs: int = 64,
                 contention_runs: int = 8, max_releases: int = 8) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self.max_runs = max_runs
        self.contention_runs = contention_runs
        self.max_releases = max_releases

    @staticmethod
    def key(engine: str, m: int, k: int, params: Mapping[str, Any] | None = None) -> str:
        """The entry of ``engine`` run with ``params`` at (m, k). Without parameters it is the
        key the store has always used; with them, the parameters follow the engine's name as
        sorted JSON (the same parameters in any order are one model)."""
        named = engine + (json.dumps(dict(params), sort_keys=True, separators=(",", ":"),
                                     default=str) if params else "")
        return f"{named}|m={m}|k={k}"

    def _load(self) -> dict[str, Any]:
        if not self.path.exists():
            return {}
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, OSError) as exc:
            raise ValueError(f"{self.path}: unreadable cost-model file ({exc})") from None

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the file's lock (``<file>.lock``, ``flock``) for a read, change and write:
        the service's release path, its planner's timings and its compute process write the
        same file, and without it one write could drop what another had just added."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            import fcntl
        except ImportError:  # no flock here: one writer at a time is the caller's to keep
            yield
            return
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _save(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".cost_models.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=2, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, engine: str, m: int, k: int,
            params: Mapping[str, Any] | None = None) -> PowerLaw | None:
        entry = self._load().get(self.key(engine, m, k, params))
        if not entry or "a" not in entry:  # no entry, or samples at one size only
            return None
        return PowerLaw.from_dict(entry)

    def samples(self, engine: str, m: int, k: int,
                params: Mapping[str, Any] | None = None) -> list[tuple[int, float, str]]:
        """``(n, seconds, source)`` of every sample: calibration timings as on a quiet
        machine (:meth:`sample_slowdowns` has the slow-down each was measured under), and
        real runs as measured."""
        return [(n, t, src) for n, t, src, _ in self._rows(engine, m, k, params)]

    def sample_slowdowns(self, engine: str, m: int, k: int,
                         params: Mapping[str, Any] | None = None) -> list[float]:
        """The slow-down each sample of :meth:`samples` was measured under (1: quiet)."""
        return [slow for *_, slow in self._rows(engine, m, k, params)]

    def _rows(self, engine: str, m: int, k: int, params: Mapping[str, Any] | None,
              ) -> list[tuple[int, float, str, float]]:
        entry = self._load().get(self.key(engine, m, k, params)) or {}
        return [(int(row[0]), float(row[1]), str(row[2]),
                 float(row[3]) if len(row) > 3 else 1.0) for row in entry.get("samples", [])]

    def put(self, engine: str, m: int, k: int, calibration: Calibration,
            params: Mapping[str, Any] | None = None) -> PowerLaw:
        """Replace the calibration samples of (engine with ``params``, m, k), keep its real
        runs, refit."""
        with self._exclusive():
            runs = [s for s in self._rows(engine, m, k, params) if s[2] == "run"]
            slowdowns = calibration.slowdowns or [1.0] * len(calibration.samples)
            fresh = [(n, t, "calibration", slow)
                     for (n, t), slow in zip(calibration.samples, slowdowns, strict=True)]
            return self._refit(engine, m, k, params, fresh + runs)

    def extend(self, engine: str, m: int, k: int, n: int, seconds: float,
               params: Mapping[str, Any] | None = None,
               slowdown: float = 1.0) -> PowerLaw | None:
        """Add a calibration sample (``engine`` timed alone on ``n`` records, e.g. by
        :func:`time_engine` at a larger size than the calibration reached, in ``seconds``
        under a ``slowdown`` measured meanwhile: kept as ``seconds / slowdown``) and refit."""
        with self._exclusive():
            rows = self._rows(engine, m, k, params)
            return self._refit(engine, m, k, params, [
                *rows, (int(n), float(seconds) / max(slowdown, 1.0), "calibration",
                        max(float(slowdown), 1.0))])

    def largest_calibrated(self, engine: str, m: int, k: int,
                           params: Mapping[str, Any] | None = None) -> int:
        """The largest size timed by calibration (0: none)."""
        return max((n for n, _, src in self.samples(engine, m, k, params)
                    if src == "calibration"), default=0)

    def observe(self, engine: str, m: int, k: int, n: int, seconds: float,
                params: Mapping[str, Any] | None = None) -> PowerLaw | None:
        """Record a real run of ``seconds`` on ``n`` records and refit (when two sizes exist)."""
        with self._exclusive():
            rows = self._rows(engine, m, k, params)
            runs = [s for s in rows if s[2] == "run"] + [(int(n), float(seconds), "run", 1.0)]
            runs = runs[-self.max_runs:]
            calibration = [s for s in rows if s[2] == "calibration"]
            return self._refit(engine, m, k, params, calibration + runs)

    def observe_release(self, n: int, late: int, steps: Mapping[str, float],
                        spanned: int | None = None) -> None:
        """Record a release's measured close steps (``n`` records, ``late`` of them not in a
        base release made before close, ``spanned`` in cells made or changed at close:
        :data:`scheduler.overhead.SPANNED_STEPS`), keeping the :attr:`max_releases` most
        recent."""
        with self._exclusive():
            data = self._load()
            entry = data.get(RELEASES_KEY) or {}
            run = [int(n), int(late), {key: float(v) for key, v in steps.items()}]
            runs = [*entry.get("runs", []), run + ([] if spanned is None else [int(spanned)])]
            data[RELEASES_KEY] = {"runs": runs[-self.max_releases:], "updated": time.time()}
            self._save(data)

    def release_overhead(self, prior: ReleaseOverhead = DEFAULT_OVERHEAD) -> ReleaseOverhead:
        """``prior`` scaled to the releases recorded here (:meth:`ReleaseOverhead.follow`):
        the steps after close as this machine runs them. None recorded: ``prior``."""
        runs = (self._load().get(RELEASES_KEY) or {}).get("runs", [])
        return prior.follow([tuple(run) for run in runs])

    def _refit(self, engine: str, m: int, k: int, params: Mapping[str, Any] | None,
               samples: list[tuple[int, float, str, float]]) -> PowerLaw | None:
        data = self._load()
        key = self.key(engine, m, k, params)
        entry: dict[str, Any] = {"engine": engine, "m": m, "k": k,
                                 "samples": [list(s) for s in samples],
                                 "updated": time.time()}
        if params:
            entry["params"] = json.loads(json.dumps(dict(params), default=str))
        calibration = [(n, t) for n, t, src, _ in samples if src == "calibration"]
        runs = [(n, t) for n, t, src, _ in samples if src == "run"]
        model = None
        if len({n for n, _ in calibration}) >= 2:
            model = PowerLaw.fit_upper(*zip(*calibration, strict=True)).observed(
                runs[-self.contention_runs:])
        elif len({s[0] for s in samples}) >= 2:
            model = PowerLaw.fit([s[0] for s in samples], [s[1] for s in samples])
        if model is not None:
            entry.update(model.to_dict())
        else:
            previous = data.get(key) or {}
            entry.update({f.name: previous[f.name] for f in fields(PowerLaw)
                          if f.name in previous})
        data[key] = entry
        self._save(data)
        return model if model is not None else self.get(engine, m, k, params)
