"""What the service tells about a survey: the release report and the status.

:class:`ReleaseReport` is ``report.json`` and the report kept with the stored release;
:class:`ServiceStatus` is ``/api/status``, read by the dashboard (``static/app.js``) and turned
into ``/metrics``. Both are typed here; ``to_json()`` gives the documents' JSON objects, whose
keys and their order are part of the interface. Names and numbers about the run only, never a
response value.
"""

from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

from streamanon.service.health import PartHealth


@dataclass(frozen=True)
class Publication:
    """When the release was published, and how long each close step took (seconds)."""

    released_at: float
    close_to_release_seconds: float
    close_steps_seconds: dict[str, float]


@dataclass(frozen=True)
class ReleaseReport:
    """One release: sizes, engines, the plan it followed, timings, distortion, the schema's
    columns and what the release did with each, the dead-letter counts, its files; once it
    is published also :class:`Publication` (``to_json`` puts its keys last, at top level)."""

    survey: str
    release_id: str
    n: int
    m: int
    k: int
    quasi_identifiers: list[str]
    columns: list[dict[str, str]]
    engine: str
    incremental: str | None  # the stage, in a two-stage release
    mode: str  # "one-shot" or "two-stage"
    nu: float
    n_base: int
    n_increment: int
    arrival_coefficient: float | None
    planned_nu: float | None
    predicted_seconds_after_close: float | None
    one_shot_estimate_seconds: float
    base_started_at: float | None
    closed_at: float | None
    base_seconds: float
    incremental_seconds: float
    compute_seconds_after_close: float
    distortion: float | None  # None: a differentially private release (not published)
    information_loss: float
    rejected: dict[str, int]
    files: dict[str, str]
    # mixed data (streamanon.type_loss): IL per type in percent, values withheld or imputed by
    # the missing-value policy, strata under k merged into others
    information_loss_by_type: dict[str, float | None] | None = None
    values_withheld: int = 0
    values_imputed: int = 0
    strata_merged: list[dict[str, Any]] = field(default_factory=list)
    # l and t asked for, and achieved per sensitive answer (streamanon.privacy)
    privacy: dict[str, Any] | None = None
    # disclosure risk and utility before and after (streamanon.risk), also in report.html
    risk: dict[str, Any] | None = None
    # the base cells' messages were made before close and spliced in (streamanon.splicing)
    spliced: bool = False
    # engine = "auto": the engine the planner chose, why, and the expected IL against
    # one-shot MDAV (less one) it chose on (scheduler.choice)
    engine_choice: dict[str, Any] | None = None
    # incremental = "auto": the stage chosen at close for the real counts, and why
    incremental_choice: dict[str, Any] | None = None
    # the live plan's close-to-release: its compute and the release steps (the overhead model)
    predicted_release_seconds: float | None = None
    # the base run's steps while the survey was open (streamanon.service.base_run): load,
    # prepare, engine, checkpoint, prepare_release; None for a one-shot release, and for a
    # release whose base run was done before a restart of the service (kept in memory only)
    base_steps_seconds: dict[str, float] | None = None
    # the plan the base run was started on: its ratio nu and base records n_base, how long
    # before the close it meant the snapshot (head_start_seconds) and how long it predicted
    # the base run, its own steps included (base_seconds); None as base_steps_seconds, and
    # for a base run started by command (no plan started it)
    base_plan: dict[str, float] | None = None
    # of a release made whole at close: how many of its records were read from the store
    # ahead of the close (streamanon.service.base_run); the load step read only the rest
    read_ahead: int = 0
    # the records gated and serialised at close: those in cells the incremental stage made or
    # changed when the release was spliced into the base one, else all n (None: not counted)
    n_spanned: int | None = None
    # [surveys] epsilon: the guarantee, the noise per attribute, the loss, the budget spent
    # (streamanon.dp; streamanon.service.private_release)
    differential_privacy: dict[str, Any] | None = None
    publication: Publication | None = None

    def published(self, publication: Publication) -> ReleaseReport:
        return replace(self, publication=publication)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "publication"}
        return out | ({} if self.publication is None else asdict(self.publication))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReleaseReport:
        """The report :meth:`to_json` gave (as stored with the release)."""
        own = {f.name: data[f.name] for f in fields(cls)
               if f.name != "publication" and (f.name in data or (f.default is MISSING
                                               and f.default_factory is MISSING))}
        publication = (Publication(**{f.name: data[f.name] for f in fields(Publication)})
                       if "released_at" in data else None)
        return cls(**own, publication=publication)


@dataclass(frozen=True)
class ReleaseStatus:
    """The survey's release as the dashboard shows it: ``status`` is ``written`` (files on
    disk) or ``published``; times after the close are ``None`` until it is published."""

    status: str
    n: int
    k: int
    engine: str
    incremental: str | None
    mode: str
    nu: float
    n_base: int
    distortion: float | None
    information_loss: float
    close_to_release_seconds: float | None
    one_shot_estimate_seconds: float
    predicted_seconds_after_close: float | None
    base_seconds: float
    incremental_seconds: float
    released_at: float | None

    @classmethod
    def of(cls, status: str, report: ReleaseReport) -> ReleaseStatus:
        published = report.publication
        return cls(
            status=status, n=report.n, k=report.k, engine=report.engine,
            incremental=report.incremental, mode=report.mode, nu=report.nu,
            n_base=report.n_base, distortion=report.distortion,
            information_loss=report.information_loss,
            close_to_release_seconds=None if published is None
            else published.close_to_release_seconds,
            one_shot_estimate_seconds=report.one_shot_estimate_seconds,
            predicted_seconds_after_close=report.predicted_seconds_after_close,
            base_seconds=report.base_seconds, incremental_seconds=report.incremental_seconds,
            released_at=None if published is None else published.released_at)


@dataclass(frozen=True)
class PlanStatus:
    """The planner's last plan (``scheduler.planner.Plan``) with the base moment it set."""

    mode: str
    nu: float
    n_total: float
    head_start_seconds: float | None
    finish_after_close_seconds: float
    arrival_coefficient: float | None
    base_at: str | None  # ISO 8601
    refine_seconds: float = 0.0  # the refinement planned after the incremental stage
    # engine = "auto": the engine the planner chooses, its expected IL against one-shot MDAV
    # (less one) and why (scheduler.choice)
    engine: str | None = None
    expected_delta: float | None = None
    choice: str | None = None
    # incremental = "auto": the stage the plan was made for (fixed at close for the real
    # counts)
    stage: str | None = None


@dataclass(frozen=True)
class ProgressStatus:
    """The stage running now (``base`` or ``release``) and the cost model's estimate of it
    (for the release: the refinement's planned seconds included, ``refine_seconds``)."""

    stage: str
    started_at: float
    elapsed_seconds: float
    expected_seconds: float | None
    refine_seconds: float | None = None


@dataclass(frozen=True)
class SurveyStatus:
    """One survey: state, counts, the plan, moments (Unix seconds), the arrival curve and its
    forecast, the running stage, the release. Counts and times only, never a data value."""

    id: str
    state: str
    error: str | None
    k: int
    engine: str
    incremental: str
    received: int
    stored: int  # the survey's, every instance's (from the shared store with several)
    stored_here: int  # what this instance counts (with several, its share since its start)
    redelivered: int
    dead_lettered: dict[str, int]  # by reason: withheld from a reader without the token
    dead_lettered_total: int
    dead_letters_unsent: int  # dead letters the broker never took after every retry
    releases: int  # published: 0 or 1
    pace: float
    now: float
    close_at: float | None
    close_requested_at: float | None
    deadline_seconds: float | None
    deadline_at: float | None
    base_at: float | None
    base_started_at: float | None
    arrival_coefficient: float | None
    nu: float | None
    cost_model: tuple[str, float, float] | None  # engine, a, b of t = a n^b
    cost_model_measured: bool  # False while provisional models are in use (being measured)
    arrivals: list[tuple[float, int]]
    forecast: list[tuple[float, float]]
    progress: ProgressStatus | None
    plan: PlanStatus | None
    release: ReleaseStatus | None
    #: the raw-derived fields this copy leaves out (:data:`RAW_DERIVED`): all of them for a
    #: reader without the control token (:meth:`public`), none for the data holder
    withheld: list[str] = field(default_factory=list)

    def public(self) -> SurveyStatus:
        """This status as a reader without the control token sees it: every field of
        :data:`RAW_DERIVED` left out (None, or no reasons) and named in ``withheld``."""
        release = self.release
        if release is not None:
            release = replace(release, distortion=None, information_loss=None)
        return replace(self, dead_lettered={}, release=release, withheld=list(RAW_DERIVED))


#: The status fields computed on the raw answers: the release's distortion and information
#: loss (sums of squares of the answers against the released cells) and the dead letters by
#: reason (how many answers were out of bounds, off the levels...). A statistic of the raw
#: answers is raw data too: they reach only a reader with the control token (the data
#: holder), never an unauthenticated one (``/api/status``, the dashboard, ``/metrics``).
RAW_DERIVED = ("release.distortion", "release.information_loss", "dead_lettered")


@dataclass(frozen=True)
class ServiceStatus:
    """Every survey, the health of each part of the service, and the clock."""

    surveys: list[SurveyStatus]
    health: dict[str, PartHealth]
    started_at: float
    now: float
    #: True when a part did not answer in time: the stored states (state, error, close and
    #: base times, the release) are the last ones read; counts and plans are current.
    stale: bool = False
    unreachable: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def public(self) -> ServiceStatus:
        """The status without its raw-derived fields (:meth:`SurveyStatus.public`)."""
        return replace(self, surveys=[s.public() for s in self.surveys])
