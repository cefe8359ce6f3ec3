"""Prometheus metrics of the service (``/metrics``): counts, plans and timings, never data.

Most counters and gauges are read from the service's state when Prometheus scrapes (a custom
collector over :meth:`Service.status`-like snapshots), so no code path can forget to update
them; the stage timings and the distortion of each release are histograms observed when a
release is published; webhook submissions and failed publish attempts are counted where they
happen (a survey's failed attempts a series at 0 from the first scrape, so that ``increase()``
sees the first one). The health of the service's parts (``streamanon.service.health``) is
recorded at each health check (``/healthz``, ``/metrics``, the watchdog's checks): whether each
part is up, and how many times it was found down. Labels are bounded sets only: the survey id
(from the configuration), the dead-letter reason (a fixed vocabulary), the survey state, the
engine name and the part (``streamanon.service.health.PARTS``).

:data:`METRICS` is the catalogue: every exported name with its type and help. The Grafana
dashboard in ``deploy/grafana/`` may only use names from it (a test checks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from streamanon.service.health import PARTS, PartHealth
from streamanon.service.reports import ReleaseReport, SurveyStatus
from streamanon.service.states import STATES

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: name -> (type, help). Counter names are given without the ``_total`` suffix that the
#: exposition format adds; histograms expose ``_bucket``, ``_sum`` and ``_count``.
METRICS: dict[str, tuple[str, str]] = {
    "streamanon_records_received": ("counter", "Responses read from the survey topic "
                                    "(stored or dead-lettered; since start-up, plus the stored "
                                    "records found at start-up)"),
    "streamanon_records_stored": ("counter", "Responses validated and stored"),
    "streamanon_records_redelivered": ("counter", "Responses read again (a redelivery, a "
                                       "replay, offsets that started again) and recognised "
                                       "as stored already, by identity"),
    "streamanon_records_dead_lettered": ("counter", "Responses sent to the dead-letter topic, "
                                         "by reason"),
    "streamanon_dead_letters_unsent": ("counter", "Dead letters the broker never took after "
                                       "every retry (each is in records_dead_lettered too)"),
    "streamanon_releases_published": ("counter", "k-anonymous releases published"),
    "streamanon_survey_state": ("gauge", "1 for the survey's current state, 0 for the others"),
    "streamanon_survey_records": ("gauge", "Records in the store for the survey"),
    "streamanon_arrival_pace_records_per_second": ("gauge", "Measured arrival pace (median of "
                                                   "recent bins)"),
    "streamanon_arrival_coefficient": ("gauge", "Arrival coefficient s of the current plan"),
    "streamanon_planned_nu": ("gauge", "Planned data ratio left to the incremental stage "
                              "(nu* or nu_end)"),
    "streamanon_planned_base_start_timestamp_seconds": ("gauge", "When the base run is "
                                                        "planned to start (Unix time)"),
    "streamanon_scheduled_close_timestamp_seconds": ("gauge", "Scheduled close (Unix time)"),
    "streamanon_deadline_timestamp_seconds": ("gauge", "Release deadline (Unix time)"),
    "streamanon_cost_model_coefficient": ("gauge", "Calibrated base cost model t = a n^b: a "
                                          "(seconds)"),
    "streamanon_cost_model_exponent": ("gauge", "Calibrated base cost model t = a n^b: b"),
    "streamanon_base_seconds": ("histogram", "Duration of base runs"),
    "streamanon_incremental_seconds": ("histogram", "Duration of incremental stages"),
    "streamanon_publish_seconds": ("histogram", "Time to publish a release to Kafka"),
    "streamanon_close_to_release_seconds": ("histogram", "From close to the published release"),
    "streamanon_release_distortion": ("histogram", "Distortion D = SSE/SST of each release"),
    "streamanon_webhook_submissions": ("counter", "Submissions to the HTTP endpoint "
                                       "(streamanon.service.webhook), by outcome: accepted, "
                                       "invalid (dead-lettered), unauthorized, rate_limited, "
                                       "too_large, unavailable"),
    "streamanon_publish_failures": ("counter", "Publish attempts of a release that failed and "
                                    "are sent again (a broker fault, or a topic that did not "
                                    "end in the release after it)"),
    "streamanon_component_up": ("gauge", "1 while the part (collector, compute, store, "
                                "publisher, broker) is healthy, 0 once it was found down"),
    "streamanon_component_failures": ("counter", "Times the part failed: found down by a "
                                      "health check, or restarted in place (the collector's "
                                      "ingest worker); one outage counts once"),
}

#: Metrics of the service's own parts (label ``component``, no survey).
SERVICE_WIDE = frozenset({"streamanon_component_up", "streamanon_component_failures"})

_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
                    7200, 14400)
#: The metric families computed on the raw answers: only a scrape with the control token gets
#: them (streamanon.service.reports.RAW_DERIVED).
RAW_DERIVED_METRICS = ("streamanon_release_distortion",)

_DISTORTION_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)


def exported_names() -> set[str]:
    """Every sample name a scrape can contain (``_total``, ``_bucket``, ... included)."""
    names: set[str] = set()
    for name, (kind, _) in METRICS.items():
        if kind == "counter":
            names |= {f"{name}_total", f"{name}_created"}
        elif kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"}
        else:
            names.add(name)
    return names


class Telemetry:
    """The service's metrics registry: histograms observed per release, and counters and
    gauges taken from the per-survey status passed to :meth:`exposition` at scrape time."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._state = _StateCollector()
        self.parts_up: dict[str, bool] = dict.fromkeys(PARTS, True)
        self.part_failures: dict[str, int] = dict.fromkeys(PARTS, 0)
        self._state.parts = (self.parts_up, self.part_failures)
        self.registry.register(self._state)
        self.histograms = {
            name: Histogram(name, METRICS[name][1], ["survey"], registry=self.registry,
                            buckets=_DISTORTION_BUCKETS if "distortion" in name
                            else _SECONDS_BUCKETS)
            for name, (kind, _) in METRICS.items() if kind == "histogram"}
        self.submissions = Counter("streamanon_webhook_submissions",
                                   METRICS["streamanon_webhook_submissions"][1],
                                   ["survey", "outcome"], registry=self.registry)
        self.publish_failures = Counter("streamanon_publish_failures",
                                        METRICS["streamanon_publish_failures"][1], ["survey"],
                                        registry=self.registry)

    def count_publish_failure(self, survey: str) -> None:
        """Count a publish attempt that failed and will be sent again."""
        self.publish_failures.labels(survey).inc()

    def count_submission(self, survey: str, outcome: str) -> None:
        """Count a submission to the webhook (``outcome`` from ``webhook.OUTCOMES``)."""
        self.submissions.labels(survey, outcome).inc()

    def observe_release(self, survey: str, report: ReleaseReport,
                        publish_seconds: float) -> None:
        """Record the timings and the distortion of a published release."""
        published = report.publication
        for name, value in (
                ("streamanon_base_seconds", report.base_seconds),
                ("streamanon_incremental_seconds", report.incremental_seconds),
                ("streamanon_publish_seconds", publish_seconds),
                ("streamanon_close_to_release_seconds",
                 published.close_to_release_seconds if published else None),
                ("streamanon_release_distortion", report.distortion)):
            if isinstance(value, (int, float)) and value >= 0:
                self.histograms[name].labels(survey).observe(float(value))

    def observe_health(self, parts: Mapping[str, PartHealth]) -> list[str]:
        """Record a health check; returns the parts that have just gone down (each outage is
        counted once, however often it is seen)."""
        went_down = [name for name, part in parts.items()
                     if not part.ok and self.parts_up.get(name, True)]
        for name, part in parts.items():
            self.parts_up[name] = part.ok
        for name in went_down:
            self.part_failures[name] = self.part_failures.get(name, 0) + 1
        return went_down

    def count_restart(self, part: str) -> None:
        """Record that ``part`` was restarted in place: a failure, unless a health check
        counted this outage already; the part is up again."""
        if self.parts_up.get(part, True):
            self.part_failures[part] = self.part_failures.get(part, 0) + 1
        self.parts_up[part] = True

    def exposition(self, surveys: list[SurveyStatus], *, raw_derived: bool = False) -> bytes:
        """The text exposition, with counters and gauges from ``surveys`` (the ``surveys``
        of :meth:`Service.status`, or their :meth:`~.reports.SurveyStatus.public` copies).
        Without ``raw_derived`` (a scrape without the control token) the series computed on
        the raw answers are left out: the distortion histogram, and the dead letters by
        reason (counted under ``reason="withheld"`` instead)."""
        self._state.current = surveys
        for survey in surveys:  # each survey's series at 0 before its first failure
            self.publish_failures.labels(survey.id)
        try:
            return generate_latest(self.registry if raw_derived else _Public(self.registry))
        finally:
            self._state.current = []


class _Public:
    """A registry's metric families but those of :data:`RAW_DERIVED_METRICS` (what
    ``generate_latest`` reads of a registry: ``collect``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        return (family for family in self.registry.collect()
                if family.name not in RAW_DERIVED_METRICS)


class _StateCollector:
    """Counters and gauges computed from the service state at scrape time."""

    def __init__(self) -> None:
        self.current: list[SurveyStatus] = []
        self.parts: tuple[dict[str, bool], dict[str, int]] = ({}, {})

    def describe(self) -> Iterable[Metric]:
        return []  # computed at collect time; names are in METRICS

    def collect(self) -> Iterable[Metric]:
        surveys = self.current

        def counter(name: str, labels: list[str]) -> CounterMetricFamily:
            return CounterMetricFamily(name, METRICS[name][1], labels=labels)

        def gauge(name: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, METRICS[name][1], labels=labels)

        received = counter("streamanon_records_received", ["survey"])
        stored = counter("streamanon_records_stored", ["survey"])
        redelivered = counter("streamanon_records_redelivered", ["survey"])
        dead = counter("streamanon_records_dead_lettered", ["survey", "reason"])
        unsent = counter("streamanon_dead_letters_unsent", ["survey"])
        releases = counter("streamanon_releases_published", ["survey"])
        state = gauge("streamanon_survey_state", ["survey", "state"])
        records = gauge("streamanon_survey_records", ["survey"])
        pace = gauge("streamanon_arrival_pace_records_per_second", ["survey"])
        coefficient = gauge("streamanon_arrival_coefficient", ["survey"])
        nu = gauge("streamanon_planned_nu", ["survey"])
        base_at = gauge("streamanon_planned_base_start_timestamp_seconds", ["survey"])
        close_at = gauge("streamanon_scheduled_close_timestamp_seconds", ["survey"])
        deadline = gauge("streamanon_deadline_timestamp_seconds", ["survey"])
        cost_a = gauge("streamanon_cost_model_coefficient", ["survey", "engine"])
        cost_b = gauge("streamanon_cost_model_exponent", ["survey", "engine"])
        for s in surveys:
            sid = s.id
            received.add_metric([sid], s.received)
            stored.add_metric([sid], s.stored_here)  # a counter per instance: they add up
            redelivered.add_metric([sid], s.redelivered)
            if s.withheld:  # a reader without the token: no reasons (raw-derived)
                dead.add_metric([sid, "withheld"], s.dead_lettered_total)
            for reason, count in sorted(s.dead_lettered.items()):
                dead.add_metric([sid, reason], count)
            unsent.add_metric([sid], s.dead_letters_unsent)
            releases.add_metric([sid], s.releases)
            for name in STATES:
                state.add_metric([sid, name], 1.0 if s.state == name else 0.0)
            records.add_metric([sid], s.stored)
            pace.add_metric([sid], s.pace)
            for family, value in ((coefficient, s.arrival_coefficient), (nu, s.nu),
                                  (base_at, s.base_at), (close_at, s.close_at),
                                  (deadline, s.deadline_at)):
                if value is not None:
                    family.add_metric([sid], value)
            if s.cost_model is not None:
                engine, a, b = s.cost_model
                cost_a.add_metric([sid, engine], a)
                cost_b.add_metric([sid, engine], b)
        up = gauge("streamanon_component_up", ["component"])
        failures = counter("streamanon_component_failures", ["component"])
        parts_up, part_failures = self.parts
        for name in sorted(parts_up):
            up.add_metric([name], 1.0 if parts_up[name] else 0.0)
            failures.add_metric([name], part_failures.get(name, 0))
        yield from (received, stored, redelivered, dead, unsent, releases, state, records, pace,
                    coefficient, nu, base_at, close_at, deadline, cost_a, cost_b, up, failures)
