"""Building and publishing the release: files, report, topic messages (specification
section 6, step 7).

The release table holds, per record, the cell means of the quasi-identifiers (original units),
the confidential values and the label, in a random order: no identifiers, no arrival order, no
timestamps, no stage or cell ids. It goes to

- ``<output>/<survey>/release.parquet`` and, as ``[output] formats`` asks, ``release.csv``,
  ``release.sav`` (SPSS) and ``release.dta`` (Stata), written atomically (categories
  dictionary-encoded in Parquet, labelled in SPSS and Stata: :mod:`streamanon.spss_stata`),
- ``<reports>/<survey>/report.json`` (:class:`~streamanon.service.reports.ReleaseReport`:
  sizes, engines, timings, distortion, and every schema field with its role and treatment;
  names and numbers about the run, never a response value, but measures computed on the raw
  answers: for the data holder, in ``[output] reports_directory``, never in the published
  folder), written once the release is published, and ``report.html`` beside it,
- topic ``<prefix>.<survey>.release`` (one partition, so order holds): one JSON message per
  record, then one manifest message
  (``{"type": "manifest", "release_id", "count", "sha256", ...}``). A record's key is
  ``<release id>:<index>``, its index being its row in the release file (0 to count - 1), and
  it has no headers (librdkafka's cost per message nearly doubles with any header); the
  manifest's key is ``<release id>:manifest``, with the headers ``streamanon-type``
  (``manifest``) and ``streamanon-release`` (the release id). :func:`release_message` reads
  either, and the headers every record carried in earlier versions (``streamanon-type``,
  ``-release``, ``-index``).

The messages are always made from the written Parquet file, checked against the checksum noted
when it was written, so a publish that was cut off (a crash, a broker fault) is sent again with
the very same records in the same order, never computed again. The topic is at-least-once: a
cut run (records, no manifest) may precede the complete one, and a resent run repeats records.
A consumer takes a release when its manifest arrives: the records with that release id, one per
index from 0 to count - 1 (the ``count`` record messages right before the manifest are one such
run); a second manifest with a release id already taken is a repeat.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from streamanon.errors import PublishError, StreamanonError
from streamanon.io import atomic_write, write_json, write_table
from streamanon.mixed import sensitive_codes
from streamanon.release import (
    Privacy,
    decoded_original,
    prepare_stored,
)
from streamanon.schema import DROPPED_ROLES, Schema
from streamanon.service.config import Config, SurveyConfig, reports_beside
from streamanon.service.kafka_clients import LIBRDKAFKA_LOGGER, KafkaSettings, ProducerKeeper
from streamanon.service.reports import ReleaseReport
from streamanon.service.store import Records
from streamanon.splicing import record_messages as record_messages  # re-exported


class FileModes(NamedTuple):
    """The permissions of a release's files and directories, whatever the process umask
    (``[output] file_mode`` and ``directory_mode``; by default as private as the store:
    the service's group may read, nobody else)."""

    file: int = 0o640
    directory: int = 0o750


PRIVATE = FileModes()

#: The release files written beside the Parquet file, in this order.
OTHER_FORMATS = ("csv", "sav", "dta")


class ReleaseFilesError(StreamanonError):
    """A written release cannot be published again: its file is gone or changed."""


# What the release does with a field of each schema role (specification section 6, step 7).
TREATMENT = {"identifier": "dropped", "quasi_identifier": "microaggregated",
             "confidential": "unchanged", "label": "unchanged", "weight": "unchanged",
             "ignore": "dropped"}


def release_columns(survey: SurveyConfig) -> list[dict[str, str]]:
    """Every schema field in schema order with its role and its treatment in the release
    (``microaggregated``, ``unchanged`` or ``dropped``): names and roles, never a value."""
    return [{"name": name, "role": spec.role,
             "type": spec.type or ("float" if spec.role == "quasi_identifier" else None),
             "treatment": TREATMENT[spec.role]}
            for name, spec in survey.fields.items()]


def records_frame(records: Records, survey: SurveyConfig) -> pd.DataFrame:
    """The stored records as a table in schema order: quasi-identifiers as stored (numbers,
    level numbers, NaN for a missing answer), confidential values, weight and label."""
    columns: dict[str, Any] = {}
    qi = survey.quasi_identifiers
    for name, spec in survey.fields.items():
        if spec.role == "quasi_identifier":
            columns[name] = records.qi[:, qi.index(name)]
        elif spec.role in ("confidential", "weight"):
            values = [row.get(name) for row in records.confidential]
            nullable = {"int": "Int64", "bool": "boolean"}.get(spec.type or "")
            if spec.type == "float":  # float64 whatever the answers (JSON 3 is stored as 3):
                # the column's type, and so its JSON, must not depend on which records it holds
                values = np.array([np.nan if v is None else v for v in values],
                                  dtype=np.float64)
            elif nullable is not None and any(v is None for v in values):  # not float64
                values = pd.array(values, dtype=nullable)
            columns[name] = values
        elif spec.role == "label":  # stored as text: back to its declared type
            columns[name] = _typed_labels(records.labels, spec.type)
    return pd.DataFrame(columns)


def survey_privacy(frame: pd.DataFrame, survey: SurveyConfig) -> Privacy | None:
    """The survey's sensitive answers of the stored records ``frame`` and its l and t, or
    None when no field is sensitive."""
    names = survey.schema.sensitive
    if not names:
        return None
    S, kinds = sensitive_codes(frame, survey.schema, names)
    return Privacy(tuple(names), S, kinds, survey.l, survey.t)


def _typed_labels(labels: list[str | None], kind: str | None) -> Any:
    """The stored labels (text) as the schema's type says: integers (nullable), numbers,
    booleans; text as it is."""
    if kind == "int":
        return pd.array([None if v is None else int(v) for v in labels], dtype="Int64")
    if kind == "float":
        return np.array([np.nan if v is None else float(v) for v in labels])
    if kind == "bool":
        return pd.array([None if v is None else v == "True" for v in labels], dtype="boolean")
    return labels


def risk_page_path(files: dict[str, str]) -> str:
    """Where ``report.html`` goes: beside ``report.json``, in the reports folder."""
    return str(Path(files["report"]).with_name("report.html"))


def write_risk_page(risk: dict[str, Any], frame: pd.DataFrame, release: pd.DataFrame,
                    survey: SurveyConfig, files: dict[str, str],
                    modes: FileModes = PRIVATE, engine: str | None = None) -> None:
    """``report.html`` (``streamanon.risk_page``) of a written release: its risk and
    utility measures (``risk``, as report.json holds them), the distributions of the stored
    records ``frame`` (:func:`records_frame`) and of the ``release`` table, never a record.
    ``engine`` is the engine the release ran (the report's: the one ``engine = "auto"``
    settled on); default the configuration's."""
    from streamanon.risk_page import render

    prepared = prepare_stored(frame, survey.schema, survey.k)
    settings = {"k": survey.k, "l": survey.l, "t": survey.t, "engine": engine or survey.engine,
                "original": f"the survey's {len(frame)} stored records",
                "release": Path(files["parquet"]).name}
    if survey.private:
        from streamanon.dp import budget_of, engine_name, guarantee

        budget = budget_of(survey.epsilon, survey.delta)
        settings["engine"] = engine_name(survey.dp_mechanism)
        settings["differential privacy"] = guarantee(
            budget.epsilon, survey.dp_mechanism, survey.dp_scope, budget.rho, budget.delta)
    page = render(risk, decoded_original(frame, prepared), release, survey.schema, settings)
    path = Path(risk_page_path(files))
    atomic_write(path, lambda tmp: Path(tmp).write_text(page, encoding="utf-8"), modes.file)


def release_risk(frame: pd.DataFrame, release: pd.DataFrame, survey: SurveyConfig,
                 order: np.ndarray | None, engine: str | None = None,
                 attacks: bool = False) -> dict[str, Any]:
    """The risk and utility measures (:func:`streamanon.risk.measure`) of the ``release`` of
    the stored records ``frame``: aligned (record linkage, interval disclosure) when ``order``
    says which record each released row is (row i is record ``order[i]``), else by
    distributions only (a release published again from its files after a restart). With
    ``attacks`` (``[output] attacks``), anonymeter's attacks
    (:func:`streamanon.attacks.holdout_attack_risk`): every stored record is released, so a
    share is held out as the control and a release made the same way (``engine``, the
    survey's k, l and t) from the rest is attacked."""
    from streamanon.attacks import holdout_attack_risk, not_measured
    from streamanon.risk import measure

    prepared = prepare_stored(frame, survey.schema, survey.k)
    original = decoded_original(frame, prepared)
    aligned = original if order is None else original.iloc[order].reset_index(drop=True)
    measures = measure(aligned, release, survey.schema, survey.k, aligned=order is not None,
                       sensitive=list(survey.schema.sensitive)).to_json()
    if not attacks:
        measures["attacks"] = not_measured(
            "off in this service: [output] attacks = true measures them after each release"
        ).to_json()
        return measures
    engine = engine or survey.engine
    # the stored records have no identifier nor ignored fields: the schema of what is there
    kept = Schema(fields={name: spec for name, spec in survey.schema.fields.items()
                          if spec.role not in DROPPED_ROLES}, strata=survey.schema.strata)

    def made_again(rest: pd.DataFrame) -> pd.DataFrame:
        from streamanon import BeyondK, Output, microaggregate

        if survey.private:  # drawn again as the release was (its noise fresh)
            from streamanon import dp

            return dp.release(rest, kept, survey.k, survey.epsilon, survey.dp_mechanism,
                              survey.dp_scope, delta=survey.delta).table
        return microaggregate(
            rest, survey.k, None if engine == "auto" else engine, schema=kept,
            privacy=BeyondK(sensitive=list(survey.schema.sensitive), l=survey.l, t=survey.t),
            output=Output(risk=False, seed=0),
            engine_params=survey.engine_params if engine == survey.engine else None
        ).data

    try:
        attacks = holdout_attack_risk(original, survey.schema, survey.k, made_again)
    except StreamanonError as exc:  # the message may hold a value: its kind only
        attacks = not_measured(f"the release could not be made again from the records not "
                               f"held out ({type(exc).__name__})")
    measures["attacks"] = attacks.to_json()
    return measures


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _make_private_dirs(directory: Path, mode: int) -> None:
    """``directory`` and the parents it lacks, each created with ``mode``; the survey's own
    directory gets ``mode`` even if it was there (an output root made by someone else is
    left as it is)."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        os.chmod(d, mode)
    os.chmod(directory, mode)


def release_dir(output: Path, survey_id: str) -> Path:
    return Path(output) / survey_id


def write_release_files(frame: pd.DataFrame, output: Path, survey_id: str,
                        formats: Sequence[str] = ("parquet", "csv"), *,
                        schema: Schema | None = None, later: bool = False,
                        modes: FileModes = PRIVATE,
                        reports: Path | None = None) -> dict[str, str]:
    """Write the Parquet file and (unless ``later``: :func:`write_release_formats` once the
    records are out) the release's other ``formats`` (``csv``, ``sav``, ``dta``); return their
    paths and checksums, and the report's path (the report is written once, when the release
    is published: :func:`write_report`) in ``<reports>/<survey>/`` (default: ``reports``
    beside ``output``), never in the published folder: it is computed on the raw answers.
    ``schema`` gives the categories their levels and the SPSS and Stata variables their
    labels (:mod:`streamanon.spss_stata`)."""
    directory = release_dir(output, survey_id)
    _make_private_dirs(directory, modes.directory)
    holder = release_dir(reports_beside(output) if reports is None else reports, survey_id)
    _make_private_dirs(holder, modes.directory)
    parquet = directory / "release.parquet"
    write_table(frame, parquet, modes.file, schema=schema)
    files = {"parquet": str(parquet), "report": str(holder / "report.json"),
             "sha256": sha256_file(parquet)}
    files |= {fmt: str(directory / f"release.{fmt}") for fmt in formats if fmt != "parquet"}
    return files if later else write_release_formats(frame, files, schema, modes)


def write_release_formats(frame: pd.DataFrame, files: dict[str, str],
                          schema: Schema | None = None,
                          modes: FileModes = PRIVATE) -> dict[str, str]:
    """The release files besides Parquet that ``files`` names (``csv``, ``sav``, ``dta``) and
    that are not written yet (no ``sha256_<format>``), each with its checksum added to
    ``files``."""
    files = dict(files)
    for fmt in OTHER_FORMATS:
        if fmt in files and f"sha256_{fmt}" not in files:
            write_table(frame, Path(files[fmt]), modes.file, schema=schema)
            files[f"sha256_{fmt}"] = sha256_file(Path(files[fmt]))
    return files


def write_report(report: ReleaseReport, modes: FileModes = PRIVATE) -> None:
    """``report.json`` of a published release, at the path its files name."""
    write_json(report.to_json(), Path(report.files["report"]), modes.file)


def read_written_release(files: dict[str, str]) -> pd.DataFrame:
    """The release table as :func:`write_release_files` wrote it (``files`` is what it
    returned): the Parquet file, if its checksum is still the one noted then."""
    path = Path(files["parquet"])
    if not path.is_file() or sha256_file(path) != files["sha256"]:
        raise ReleaseFilesError(
            f"{path}: the release file is missing or has changed since it was written; "
            "restore it (a written release is published from its files, never computed again)")
    return pd.read_parquet(path)


def release_manifest(report: ReleaseReport) -> dict[str, Any]:
    """The manifest message of the release ``report`` describes (the same for every run)."""
    manifest = {"type": "manifest", "survey": report.survey, "release_id": report.release_id,
                "count": report.n, "sha256": report.files["sha256"], "k": report.k,
                "engine": report.engine, "incremental": report.incremental}
    # no distortion, loss or dead-letter count: statistics of the raw answers stay with the
    # data holder (report.json in the reports folder), never on a topic
    if report.differential_privacy is not None:  # the guarantee, not the loss (raw data's)
        manifest["differential_privacy"] = {key: report.differential_privacy[key] for key in (
            "epsilon", "delta", "rho", "mechanism", "scope", "differentially_private",
            "guarantee") if key in report.differential_privacy}
    return manifest


class ReleasePublisher:
    """The release topic's producer: librdkafka (confluent-kafka), whose ``produce`` costs a
    few microseconds of Python per message where aiokafka's batches cost tens, so that a million
    records leave in seconds (the close-to-release benchmark, docs/benchmarks/service.md).

    One request in flight and no reordering retries keep the topic in the order the
    messages were queued; deliveries report errors only (a callback per record would cost as
    much as producing it). :meth:`publish` blocks: run it in a thread."""

    def __init__(self, config: Config, timeout: float = 60.0) -> None:
        """``timeout``: seconds a message may wait for the broker before the publish fails
        (and is tried again by the caller)."""
        self.timeout = timeout
        self._errors: list[Any] = []
        # one publish at a time: two surveys closing together share this producer, and a
        # delivery error must reach the publish whose message it was
        self._lock = threading.Lock()
        options = {**KafkaSettings.from_config(config).librdkafka_options(),
            # idempotent: a send retried after a leader change is written once
            "acks": "all", "enable.idempotence": config.kafka.idempotent_producers,
            "linger.ms": 5,
            "batch.size": 1_000_000, "compression.type": "none",  # any consumer reads it
            "max.in.flight.requests.per.connection": 1,
            "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
            "message.timeout.ms": int(timeout * 1000), "delivery.report.only.error": True,
            # never let a produce create the topic (a broker replaced mid-publish has none:
            # auto-created, it would get the broker's default partitions, and the messages
            # after the loss would go on as if the run were whole); a topic missing for 5 s
            # fails the publish, which makes it (Releaser._ensure_topic) and sends it again
            "allow.auto.create.topics": False, "topic.metadata.propagation.max.ms": 5000,
            "on_delivery": self._delivered, "logger": logging.getLogger(LIBRDKAFKA_LOGGER)}
        # an idempotent producer the brokers forgot fails: after a failed publish the next
        # one (the same release, tried again) goes through a new producer
        self._keeper = ProducerKeeper(options)
        self._producer = self._keeper.producer()
        self.closed = False

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(err)

    def publish(self, topic: str, messages: Sequence[bytes], manifest: dict[str, Any]) -> None:
        """Every record message on partition 0 (key ``<release id>:<index>``), then the
        manifest (key ``<release id>:manifest``, headers ``streamanon-type`` and
        ``-release``) once they are all delivered. Raises :class:`PublishError` when the
        broker refuses or does not take them in time. One publish at a time (a second
        waits)."""
        with self._lock:
            self._publish(topic, messages, manifest)

    def _publish(self, topic: str, messages: Sequence[bytes], manifest: dict[str, Any]) -> None:
        release_id = str(manifest["release_id"]).encode()
        self._producer = self._keeper.renewed(self._producer)
        produce = self._producer.produce
        prefix = release_id + b":"
        self._errors.clear()
        for i, value in enumerate(messages):
            while True:
                try:  # (topic, value, key, partition) by position: a third less Python per
                    # record than by keyword (0.83-0.87 s against 1.10-1.28 s a million)
                    produce(topic, value, b"%b%d" % (prefix, i), 0)
                    break
                except BufferError:  # the local queue is full: let librdkafka send
                    self._producer.poll(0.05)
                    self._raise_errors()
        self._flush()
        produce(topic, json.dumps(manifest).encode(), key=prefix + b"manifest", partition=0,
                headers=[("streamanon-type", b"manifest"), ("streamanon-release", release_id)])
        self._flush()

    def _flush(self) -> None:
        left = self._producer.flush(self.timeout + 5.0)
        self._raise_errors()
        if left:
            self._producer.purge()
            self._keeper.spoil(f"{left} messages not delivered")
            raise PublishError(f"{left} messages not delivered within {self.timeout:.0f} s")

    def _raise_errors(self) -> None:
        if self._errors:
            first, count = self._errors[0], len(self._errors)
            self._errors.clear()
            self._keeper.spoil(f"{count} message(s) refused: {first.str()}")
            self._producer.purge()
            self._producer.flush(0)
            raise PublishError(f"the broker refused {count} message(s): {first.str()}")

    def answering(self, timeout: float) -> None:
        """Ask the brokers for the cluster's metadata; raises ``KafkaException`` when none
        answers within ``timeout`` seconds (the health check)."""
        self._producer.list_topics(timeout=timeout)

    def close(self) -> None:
        self.closed = True
        self._producer.flush(5.0)


async def release_is_complete(config: Config, topic: str, release_id: str,
                              count: int) -> bool:
    """Whether ``topic`` ends in the whole of ``release_id``: its manifest last, and right
    before it the run a consumer takes, ``count`` records of the release from index 0 to
    ``count - 1``. The run's ends are read: it is published on one partition, in order, so a
    record lost before the manifest (acknowledged by a broker replaced since) moves index 0
    away from where the manifest's count puts it."""
    from streamanon.service.offsets import messages_before_end

    end, found = await asyncio.to_thread(messages_before_end, config, topic,
                                         [1, 2, count + 1])
    expected = {end - 1: ReleaseMessage("manifest", release_id, None)}
    if count:
        expected |= {end - 2: ReleaseMessage("record", release_id, count - 1),
                     end - 1 - count: ReleaseMessage("record", release_id, 0)}
    return all(offset in found
               and release_message(found[offset].key, found[offset].headers) == message
               for offset, message in expected.items())


class ReleaseMessage(NamedTuple):
    """What a message of the release topic is: a ``record`` (with its ``index``, its row in
    the release file) or the ``manifest`` of the release ``release_id``."""

    kind: str
    release_id: str
    index: int | None


def release_message(key: bytes | None,
                    headers: Sequence[tuple[str, bytes]] | None) -> ReleaseMessage | None:
    """A release topic message's kind, release id and index from its ``key``
    (``<release id>:<index>`` or ``<release id>:manifest``), or, for a message without such a
    key (published by an earlier version), from its ``headers`` (``streamanon-type``,
    ``-release``, ``-index``); None when it has neither."""
    if key:
        release_id, _, tail = key.decode("ascii", "replace").rpartition(":")
        if release_id and tail == "manifest":
            return ReleaseMessage("manifest", release_id, None)
        if release_id and tail.isdigit():
            return ReleaseMessage("record", release_id, int(tail))
    heads = dict(headers or [])
    kind, release = heads.get("streamanon-type"), heads.get("streamanon-release")
    if kind not in (b"record", b"manifest") or release is None:
        return None
    index = heads.get("streamanon-index")
    return ReleaseMessage(kind.decode(), release.decode("utf-8", "replace"),
                          int(index) if kind == b"record" and index is not None
                          and index.isdigit() else None)
