"""Service configuration: one TOML file, ``STREAMANON_*`` environment overrides, secrets apart.

See the configuration reference of the documentation (docs/guide/configuration.md) for every
key. Errors are collected and reported all at once, each with the key it concerns. Secrets
(the HMAC key that pseudonymises respondent ids for de-duplication, the bearer token of the
control endpoints) are read from the environment or from files named there, never from the
TOML file:

- ``STREAMANON_HMAC_KEY`` or ``STREAMANON_HMAC_KEY_FILE``
- ``STREAMANON_HTTP_TOKEN`` or ``STREAMANON_HTTP_TOKEN_FILE``
- ``STREAMANON_KAFKA_SASL_PASSWORD`` or ``STREAMANON_KAFKA_SASL_PASSWORD_FILE`` (with SASL)
- ``STREAMANON_WEBHOOK_PASSWORD`` or ``STREAMANON_WEBHOOK_PASSWORD_FILE`` (the HTTP Basic
  password of the submissions endpoint, when a survey has ``[surveys.webhook]``)

Any other key of the sections ``kafka``, ``store``, ``output``, ``http``, ``planner`` and
``compute`` can be overridden with ``STREAMANON_<SECTION>_<KEY>``, e.g.
``STREAMANON_KAFKA_BOOTSTRAP_SERVERS``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from streamanon.durations import parse_duration
from streamanon.errors import StreamanonError
from streamanon.schema import FieldSpec, Schema
from streamanon.service.private_settings import PrivateSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SECRET_KEYS = {"hmac_key", "http_token", "token", "secret", "hmac_key_file", "http_token_file",
               "password", "sasl_password", "sasl_password_file", "sasl_plain_password"}
_SECTIONS = ("kafka", "store", "output", "http", "planner", "compute")


def reports_beside(directory: Path) -> Path:
    """The default reports folder of releases written to ``directory``: ``reports`` beside it
    (``[output] reports_directory`` unset; ``streamanon report`` looks there too)."""
    return Path(directory).parent / "reports"


class ConfigError(StreamanonError):
    """The configuration is invalid; the message lists every problem with its key."""

    def __init__(self, problems: list[str], source: str = "configuration") -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid {source} ({len(problems)} problem(s)):\n{lines}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class WebhookConfig(_Strict):
    """``[surveys.webhook]``: submissions over HTTP (``streamanon.service.webhook``)."""

    # "kobo": KoboToolbox REST Services JSON; "json": a flat object with the schema's names
    format: Literal["kobo", "json"] = "kobo"
    username: str = Field(min_length=1)  # HTTP Basic; the password from the environment
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024, le=16 * 1024 * 1024)
    # per client (address): a token bucket of `burst` submissions refilled at this rate
    rate_per_second: float = Field(default=100.0, gt=0)
    burst: int = Field(default=500, ge=1)
    # behind a reverse proxy: the client is the address the proxy appended to X-Forwarded-For
    forwarded_for: bool = False


class SurveyConfig(PrivateSettings, _Strict):
    """One ``[[surveys]]`` table: the survey, its schema, its plan and its release (its
    differential-privacy settings from :class:`PrivateSettings`)."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    close: datetime | Literal["on-command"] = "on-command"
    deadline: float | None = None  # seconds after close (a duration string in TOML)
    k: int = Field(ge=1)
    # "auto": the planner chooses ONA* when its base run fits, else MDAV (scheduler.choice)
    engine: str = "auto"
    engine_params: dict[str, Any] = Field(default_factory=dict)
    # "auto": the planner chooses NN-split-end or 2MDAV (the stages whose traits give an
    # auto_rank: streamanon.service.engine_traits.auto_stage_names) by the
    # same objective as nu, and the stage is fixed at close from the real counts.
    incremental: str = "auto"
    incremental_params: dict[str, Any] = Field(default_factory=dict)
    # Anytime refinement after the incremental stage (streamanon.refine): "off", "auto" (the
    # time left before the deadline less the release overhead) or seconds.
    refine: str | float = "off"
    # What the planner seeks without a deadline: "balanced" (the latest base snapshot whose
    # base run ends before the close at the upper bound of its time, within the ratios whose
    # expected information loss is within max_delta of the engine's one-shot release,
    # scheduler.quality; one-shot at close when that is not clearly sooner) or "earliest"
    # (the earliest release whatever the loss: the paper's nu*, with room for a slower base
    # run). A deadline plan takes the smallest ratio that meets the deadline.
    objective: Literal["balanced", "earliest"] = "balanced"
    max_delta: float = Field(default=0.05, ge=0, le=10)
    # The smallest ratio of late records the planner may choose without a deadline (default
    # 0: none): the base run starts at least that early whatever the cost model predicts
    # (within the quality bound and the time left; a floor also rules out one-shot at close).
    # ``streamanon demo`` sets it to what leaves 1,200 late records.
    min_nu: float = Field(default=0.0, ge=0, lt=1)
    duplicates: Literal["reject", "allow"] = "reject"
    expected_records: int | None = Field(default=None, ge=1)
    # What a dead letter keeps of the respondent id: "keep" (the original bytes) or "redact"
    # (pseudonyms instead, see ``deadletters.redact_dead_letter``).
    dead_letter_identifier: Literal["keep", "redact"] = "keep"
    fields: dict[str, FieldSpec] = Field(alias="schema")
    # Microaggregate within each stratum of these fields (streamanon.strata).
    strata: list[str] = Field(default_factory=list)
    # Beyond k-anonymity, on the fields marked sensitive = true (streamanon.privacy): distinct
    # l-diversity and t-closeness of every cell, merged at close where needed; the gate checks.
    l: int | None = Field(default=None, ge=1)  # noqa: E741 (the model's name)
    t: float | None = Field(default=None, ge=0, le=1)
    # Beyond k: epsilon, delta, dp_mechanism, dp_scope, epsilon_budget, out_of_domain
    # (streamanon.service.private_settings.PrivateSettings)
    webhook: WebhookConfig | None = None

    @field_validator("deadline", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_duration(value)
        return value

    @field_validator("refine", mode="before")
    @classmethod
    def _refine(cls, value: Any) -> Any:
        from streamanon.refine import parse_refine

        try:
            return parse_refine(value)
        except StreamanonError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("close")
    @classmethod
    def _aware(cls, value: Any) -> Any:
        if isinstance(value, datetime) and value.tzinfo is None:
            raise ValueError("close time needs a time zone, e.g. 2026-12-01T18:00:00Z")
        return value

    @model_validator(mode="after")
    def _floor_without_deadline(self) -> SurveyConfig:
        if self.min_nu > 0 and self.deadline is not None:
            raise ValueError("min_nu applies to the plans without a deadline; a deadline plan "
                             "takes the smallest ratio that meets the deadline")
        return self

    @property
    def close_at(self) -> datetime | None:
        return self.close if isinstance(self.close, datetime) else None

    def names(self, role: str) -> list[str]:
        return [name for name, spec in self.fields.items() if spec.role == role]

    @property
    def identifier(self) -> str:
        return self.names("identifier")[0]

    @property
    def quasi_identifiers(self) -> list[str]:
        return self.names("quasi_identifier")

    @property
    def schema(self) -> Schema:
        """The survey's schema as the core reads it (``streamanon.schema``). A survey that
        :attr:`clamps` codes an answer off a category's, ordinal's or bool's levels as
        missing, so the domain of every such released field has the missing level: the
        schema says the field is not required (from the settings alone, never the data)."""
        return Schema(fields=self.release_fields(self.fields), strata=tuple(self.strata))


class KafkaConfig(_Strict):
    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = Field(default="streamanon", pattern=r"^[A-Za-z0-9_.-]+$")
    group_id: str = "streamanon-collector"
    partitions: int = Field(default=4, ge=1)
    batch_max_records: int = Field(default=10_000, ge=1)
    # A response longer than this is dead-lettered ``too_large`` unread (a prefix is kept).
    max_message_bytes: int = Field(default=1024 * 1024, ge=1024)
    # retention.ms of the dead-letter topics the service creates (-1: forever): a dead letter
    # holds the raw response, respondent id and confidential answers included.
    dead_letter_retention_ms: int = Field(default=7 * 24 * 3600 * 1000, ge=-1)
    # The collector's consumer-group session: a member silent this long is dropped and its
    # partitions go to the others. Brokers refuse less than their group.min.session.timeout.ms
    # (Kafka's default: 6 s). Shorter sessions make restarts rejoin faster, but with 10 s a
    # service killed again and again while it joined never drained (the crash-safety test,
    # not understood yet): keep the default unless restarts are rare.
    session_timeout_ms: int = Field(default=30_000, ge=6_000, le=1_800_000)
    # The service's producers (release, dead letters, webhook submissions) idempotent: a send
    # retried across a leader change is written once. A broker that forgets producer ids when
    # it restarts (the embedded, in-memory one) stalls an idempotent producer's sends until
    # they time out (a minute) before a new producer takes over: false there.
    idempotent_producers: bool = True
    # Copies of each topic the service creates (-1: the brokers' default.replication.factor,
    # which managed Kafka sets to 3); a topic that exists keeps its own.
    replication_factor: int = Field(default=-1, ge=-1, le=32)
    # Sent by every client the service and the CLI make (None: each library's own).
    client_id: str | None = None
    # Security, for every client the service and the CLI make (``kafka_clients.KafkaSettings``).
    # The SASL password comes from STREAMANON_KAFKA_SASL_PASSWORD[_FILE], never from here.
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    ssl_cafile: Path | None = None  # CA bundle that signed the brokers' certificates
    ssl_certfile: Path | None = None  # client certificate, for brokers that require one
    ssl_keyfile: Path | None = None


class StoreConfig(_Strict):
    url: str = "sqlite:///streamanon.db"


#: The formats of a release's files: ``release.<format>``.
RELEASE_FORMATS = ("parquet", "csv", "sav", "dta")


class OutputConfig(_Strict):
    """Where releases go, in which formats, and their permissions: files ``file_mode`` (default
    0640), their directories ``directory_mode`` (default 0750), whatever the process umask.
    Modes are octal, as a string (``"0640"``) or a TOML octal integer (``0o640``); one that
    lets any user write is refused. ``formats`` lists ``release.<format>`` files among
    ``parquet`` (always: the release topic is sent from it), ``csv``, ``sav`` (SPSS) and
    ``dta`` (Stata), as a list or, in the environment, separated by commas."""

    directory: Path = Path("releases")
    # the data holder's reports (report.json, report.html: measures computed on the raw
    # answers), never in the folder that is published; default: "reports" beside `directory`
    reports_directory: Path | None = None
    formats: list[Literal["parquet", "csv", "sav", "dta"]] = Field(
        default_factory=lambda: ["parquet", "csv"])
    file_mode: int = 0o640
    directory_mode: int = 0o750
    # anonymeter's attacks in report.html (streamanon.attacks), measured after the release is
    # out: seconds of computation a release, and the extra `streamanon[risk]`
    attacks: bool = False

    @field_validator("formats", mode="before")
    @classmethod
    def _listed(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("formats")
    @classmethod
    def _with_parquet(cls, value: list[str]) -> list[str]:
        if "parquet" not in value:
            raise ValueError("the formats include \"parquet\": the release topic is sent from "
                             "the Parquet file (add csv, sav or dta beside it)")
        if len(set(value)) != len(value):
            raise ValueError("a format is listed twice")
        return value

    @model_validator(mode="after")
    def _reports_apart(self) -> OutputConfig:
        published = self.directory.resolve()
        reports = self.reports.resolve()
        if reports == published or published in reports.parents:
            which = ("reports_directory" if self.reports_directory is not None
                     else "the default reports folder (\"reports\" beside directory)")
            raise ValueError(f"{which}, {str(self.reports)!r}, is inside the published "
                             f"directory {str(self.directory)!r}: the reports are computed on "
                             "the raw answers and stay with the data holder; set "
                             "reports_directory to a folder of its own")
        return self

    @property
    def reports(self) -> Path:
        """Where each survey's reports go: ``reports_directory``, by default ``reports``
        beside the releases' ``directory``."""
        if self.reports_directory is not None:
            return self.reports_directory
        return reports_beside(self.directory)

    @field_validator("file_mode", "directory_mode", mode="before")
    @classmethod
    def _octal(cls, value: object) -> int:
        if isinstance(value, str):
            text = value.strip().lower().removeprefix("0o")
            if not text or any(c not in "01234567" for c in text):
                raise ValueError(f"a mode is octal, such as \"0640\", got {value!r}")
            value = int(text, 8)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
            raise ValueError(f"a mode is between 0 and 0777 (octal), got {value!r}")
        if value & 0o002:
            raise ValueError(f"mode {value:04o} lets any user write the release; "
                             "use at most 0775 (default 0640 for files, 0750 for directories)")
        return value


class HttpConfig(_Strict):
    bind: str = "127.0.0.1:8080"

    @field_validator("bind")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"expected HOST:PORT, got {value!r}")
        return value

    @property
    def host(self) -> str:
        return self.bind.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.bind.rpartition(":")[2])


class PlannerConfig(_Strict):
    interval_seconds: float = Field(default=5.0, gt=0)
    arrival_bin_seconds: float = Field(default=60.0, gt=0)
    arrival_bins: int = Field(default=15, ge=1)
    cost_models: Path | None = None  # default $STREAMANON_DATA_DIR/cost_models.json
    calibration_seconds: float = Field(default=3.0, gt=0)


class ComputeConfig(_Strict):
    """Where the base engine runs. ``cluster = "local"`` (default): in the service's compute
    process. ``"tcp://scheduler:8786"`` (a Dask scheduler) or ``"local-N"`` (N worker processes
    started on this machine for each base run): the base snapshot is cut into parts of at most
    ``part_size`` records, each microaggregated by the survey's engine on a Dask worker
    (``streamanon.engines.partitioned``). The incremental stage and the gate stay here."""

    cluster: str = "local"
    part_size: int = Field(default=100_000, ge=1)

    @field_validator("cluster")
    @classmethod
    def _where(cls, value: str) -> str:
        if value != "local" and not re.fullmatch(r"local-[1-9]\d*", value) \
                and "://" not in value:
            raise ValueError(f"expected 'local', 'local-N' or a Dask scheduler address such as "
                             f"tcp://scheduler:8786, got {value!r}")
        return value


class Config(_Strict):
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    planner: PlannerConfig = Field(default_factory=PlannerConfig)
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    surveys: list[SurveyConfig] = Field(min_length=1)
    hmac_key: bytes = Field(default=b"", exclude=True, repr=False)
    http_token: str = Field(default="", exclude=True, repr=False)
    kafka_sasl_password: str = Field(default="", exclude=True, repr=False)
    webhook_password: str = Field(default="", exclude=True, repr=False)

    def survey(self, survey_id: str) -> SurveyConfig:
        for s in self.surveys:
            if s.id == survey_id:
                return s
        raise KeyError(survey_id)

    def topic(self, survey_id: str, kind: str) -> str:
        """``<prefix>.<survey>.<kind>``, kind in responses, deadletter, release."""
        return f"{self.kafka.topic_prefix}.{survey_id}.{kind}"

    def topic_replicas(self) -> int:
        """Copies of each topic the service creates (-1: the brokers' default)."""
        return self.kafka.replication_factor

    def topic_configs(self) -> dict[str, dict[str, str]]:
        """Kafka settings of the topics the service creates, by topic: the dead-letter
        topics keep raw responses for ``kafka.dead_letter_retention_ms`` only."""
        retention = str(self.kafka.dead_letter_retention_ms)
        return {self.topic(s.id, "deadletter"): {"retention.ms": retention}
                for s in self.surveys}

    @property
    def control_topic(self) -> str:
        return f"{self.kafka.topic_prefix}.control"


# ---------------------------------------------------------------------------------------------


def _location(loc: tuple[Any, ...], raw: Mapping[str, Any]) -> str:
    parts: list[str] = []
    node: Any = raw
    for item in loc:
        if isinstance(item, int):
            ident = None
            if isinstance(node, list) and 0 <= item < len(node) and isinstance(node[item], dict):
                ident = node[item].get("id")
            parts[-1] = f"{parts[-1]}[{item}]" + (f"({ident})" if ident else "")
            node = node[item] if isinstance(node, list) and 0 <= item < len(node) else None
        else:
            parts.append(str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return ".".join(parts) or "(top level)"


def _secret_keys(raw: Any, path: str = "") -> list[str]:
    found = []
    if isinstance(raw, dict):
        for key, value in raw.items():
            where = f"{path}.{key}" if path else str(key)
            if str(key).lower() in SECRET_KEYS:
                found.append(where)
            found.extend(_secret_keys(value, where))
    elif isinstance(raw, list):
        for i, value in enumerate(raw):
            found.extend(_secret_keys(value, f"{path}[{i}]"))
    return found


def _read_secret(env: Mapping[str, str], name: str, problems: list[str]) -> str:
    value = env.get(f"STREAMANON_{name}")
    file = env.get(f"STREAMANON_{name}_FILE")
    if value and file:
        problems.append(f"STREAMANON_{name} and STREAMANON_{name}_FILE: set one, not both")
        return ""
    if file:
        try:
            return Path(file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            problems.append(f"STREAMANON_{name}_FILE: cannot read {file}: {exc.strerror}")
            return ""
    return value or ""


def _variable_name_problems(survey: SurveyConfig, formats: list[str], where: str) -> list[str]:
    """Two released fields that would share an SPSS or Stata variable name, found at start
    rather than when the release is written."""
    from streamanon.spss_stata import variable_names

    released = [name for name in survey.fields if name not in survey.schema.dropped]
    problems = []
    for fmt in ("sav", "dta"):
        if fmt in formats:
            try:
                variable_names(released, f".{fmt}")
            except StreamanonError as exc:
                problems.append(f"{where}.schema: {exc}")
    return problems


def _apply_env(raw: dict[str, Any], env: Mapping[str, str]) -> None:
    models = {"kafka": KafkaConfig, "store": StoreConfig, "output": OutputConfig,
              "http": HttpConfig, "planner": PlannerConfig, "compute": ComputeConfig}
    for section in _SECTIONS:
        for key in models[section].model_fields:
            value = env.get(f"STREAMANON_{section.upper()}_{key.upper()}")
            if value is not None:
                raw.setdefault(section, {})[key] = value


def parse_config(raw: dict[str, Any], env: Mapping[str, str] | None = None, *,
                 source: str = "configuration", require_secrets: bool = True) -> Config:
    """Validate a parsed TOML document with environment overrides and secrets."""
    from streamanon.engines import available_engines
    from streamanon.incremental import available_stages
    from streamanon.mixed import mixed_engines
    from streamanon.service.engine_traits import auto_engine_names, auto_stage_names

    env = os.environ if env is None else env
    raw = {key: (dict(value) if isinstance(value, dict) else value) for key, value in raw.items()}
    problems = [f"{where}: secrets must not be in the configuration file; use the environment "
                "(STREAMANON_HMAC_KEY[_FILE], STREAMANON_HTTP_TOKEN[_FILE], "
                "STREAMANON_WEBHOOK_PASSWORD[_FILE])"
                for where in _secret_keys(raw)]
    _apply_env(raw, env)
    hmac_key = _read_secret(env, "HMAC_KEY", problems)
    http_token = _read_secret(env, "HTTP_TOKEN", problems)
    if require_secrets and not hmac_key:
        problems.append("STREAMANON_HMAC_KEY: not set (needed to pseudonymise respondent ids)")
    elif hmac_key and len(hmac_key) < 16:
        problems.append("STREAMANON_HMAC_KEY: too short, use at least 16 characters")
    if require_secrets and not http_token:
        problems.append("STREAMANON_HTTP_TOKEN: not set (needed by the control endpoints)")
    sasl_password = _read_secret(env, "KAFKA_SASL_PASSWORD", problems)
    webhook_password = _read_secret(env, "WEBHOOK_PASSWORD", problems)
    config = None
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors():
            problems.append(f"{_location(err['loc'], raw)}: {err['msg']}")
    if config is not None:
        problems += _kafka_security_problems(config.kafka, sasl_password, require_secrets)
        hooks = [s.id for s in config.surveys if s.webhook is not None]
        if hooks and require_secrets and not webhook_password:
            problems.append(f"STREAMANON_WEBHOOK_PASSWORD: not set (the submissions endpoint "
                            f"of survey(s) {', '.join(hooks)} needs it)")
        elif hooks and webhook_password and len(webhook_password) < 12:
            problems.append("STREAMANON_WEBHOOK_PASSWORD: too short, use at least 12 "
                            "characters")
        engines = {e.name: e for e in available_engines()}
        stages = {s.name for s in available_stages()}
        seen: set[str] = set()
        for i, survey in enumerate(config.surveys):
            where = f"surveys[{i}]({survey.id})"
            if survey.id in seen:
                problems.append(f"{where}.id: survey id used twice")
            seen.add(survey.id)
            engine = engines.get(survey.engine)
            if survey.engine == "auto":  # the planner chooses (scheduler.choice)
                if survey.engine_params:
                    problems.append(f"{where}.engine_params: engine \"auto\" takes no "
                                    "parameters (it chooses between "
                                    f"{' and '.join(auto_engine_names())} with their "
                                    "defaults)")
            elif engine is None:
                problems.append(f"{where}.engine: unknown engine {survey.engine!r}; available: "
                                f"auto, {', '.join(sorted(engines))}")
            elif engine.per_record:
                problems.append(f"{where}.engine: {engine.name} needs per-record parameter(s) "
                                f"{', '.join(sorted(engine.per_record))}, which the service "
                                "does not supply; use it with 'streamanon anonymize'")
            else:
                unknown = sorted(set(survey.engine_params) - set(engine.parameters))
                if unknown:
                    problems.append(f"{where}.engine_params: {engine.name} has no parameter "
                                    f"{', '.join(unknown)}; accepted: "
                                    f"{', '.join(sorted(engine.parameters)) or 'none'}")
            if survey.incremental == "auto":
                if survey.incremental_params:
                    problems.append(f"{where}.incremental_params: incremental \"auto\" takes "
                                    f"no parameters (it chooses between "
                                    f"{' and '.join(auto_stage_names())} with their "
                                    "defaults)")
            elif survey.incremental not in stages:
                problems.append(f"{where}.incremental: unknown stage {survey.incremental!r}; "
                                f"available: auto, {', '.join(sorted(stages))}")
            if len(survey.names("identifier")) != 1:
                problems.append(f"{where}.schema: exactly one field must have role "
                                "'identifier' (the respondent id)")
            problems += [f"{where}.schema: {p}" if p.startswith(("no field", "more than"))
                         else f"{where}.{p}" if p.startswith("strata") else f"{where}.schema.{p}"
                         for p in survey.schema.problems()]
            if (survey.l is not None or survey.t is not None) and not survey.schema.sensitive:
                problems.append(f"{where}: l and t are about sensitive answers; mark the "
                                "confidential fields they protect sensitive = true")
            problems += _variable_name_problems(survey, config.output.formats, where)
            nominal = [n for n in survey.quasi_identifiers
                       if survey.fields[n].type in ("category", "bool")]
            if nominal and survey.engine not in mixed_engines() | {"auto"}:
                problems.append(f"{where}.engine: {survey.engine} works on numeric and ordinal "
                                f"quasi-identifiers only, and {', '.join(nominal)} are "
                                f"categorical; engines for mixed data: "
                                f"{', '.join(sorted(mixed_engines()))}")
            for name, spec in survey.fields.items():
                key = f"{where}.schema.{name}"
                if spec.type in ("category", "ordinal") and not spec.levels \
                        and spec.role == "quasi_identifier":
                    # stored as level numbers from the first response on
                    problems.append(f"{key}.levels: the service needs the levels of a "
                                    f"{spec.type} quasi-identifier")
                if spec.role in ("confidential", "label") and spec.type is None:
                    # The release publishes these columns as they are: an untyped one could
                    # mix strings and numbers, which the Parquet writer refuses at close.
                    problems.append(f"{key}: a {spec.role} field needs a type "
                                    "(int, float, str, bool, timestamp or text)")
                if spec.role in ("confidential", "label") and spec.type in ("category",
                                                                           "ordinal"):
                    problems.append(f"{key}.type: {spec.type} is a quasi-identifier type; a "
                                    f"{spec.role} field is int, float, str, bool, timestamp "
                                    "or text")
                if spec.role == "weight" and not spec.required:
                    problems.append(f"{key}.required: a weight is required (every released "
                                    "record needs one)")
                if spec.role == "identifier" and spec.type not in (None, "str", "int"):
                    problems.append(f"{key}.type: an identifier is str or int")
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*(/[A-Za-z_][A-Za-z0-9_.-]*)*",
                                    name):
                    problems.append(f"{key}: field names must be identifiers, or group paths "
                                    "of identifiers (household/age)")
    if problems:
        raise ConfigError(problems, source)
    assert config is not None
    return config.model_copy(update={"hmac_key": hmac_key.encode(), "http_token": http_token,
                                     "kafka_sasl_password": sasl_password,
                                     "webhook_password": webhook_password})


def _kafka_security_problems(kafka: KafkaConfig, sasl_password: str,
                             require_secrets: bool) -> list[str]:
    problems = []
    sasl = kafka.security_protocol.startswith("SASL_")
    tls = kafka.security_protocol in ("SSL", "SASL_SSL")
    if sasl:
        if kafka.sasl_mechanism is None:
            problems.append(f"kafka.sasl_mechanism: {kafka.security_protocol} needs one "
                            "(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
        if not kafka.sasl_username:
            problems.append(f"kafka.sasl_username: {kafka.security_protocol} needs one")
        if require_secrets and not sasl_password:
            problems.append(f"STREAMANON_KAFKA_SASL_PASSWORD: not set (kafka.security_protocol "
                            f"is {kafka.security_protocol})")
    else:
        for key in ("sasl_mechanism", "sasl_username"):
            if getattr(kafka, key) is not None:
                problems.append(f"kafka.{key}: only used with security_protocol SASL_PLAINTEXT "
                                "or SASL_SSL")
    for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        path = getattr(kafka, key)
        if path is None:
            continue
        if not tls:
            problems.append(f"kafka.{key}: only used with security_protocol SSL or SASL_SSL")
        elif not path.is_file():
            problems.append(f"kafka.{key}: no such file {path}")
    if kafka.ssl_keyfile is not None and kafka.ssl_certfile is None:
        problems.append("kafka.ssl_keyfile: goes with kafka.ssl_certfile")
    return problems


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None, *,
                require_secrets: bool = True) -> Config:
    """Read and validate ``path`` (TOML)."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"], str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: not valid TOML: {exc}"], str(path)) from None
    return parse_config(raw, env, source=f"configuration {path}",
                        require_secrets=require_secrets)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)
