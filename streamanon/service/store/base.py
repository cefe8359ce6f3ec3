"""The store's interface and what its backends share: :class:`Store` (every operation, in
SQL that runs on both backends), the rows it takes and gives (:class:`RecordRow`,
:class:`Records`, :class:`Checkpoint`, :class:`ReleaseRow`, :class:`SurveyState`), its errors,
the tables (:data:`SCHEMA`) and a record's content digest (:func:`record_digest`).

It may import the standard library, NumPy, orjson, :mod:`streamanon.errors` and
:mod:`streamanon.service.states`; never a backend module nor a database driver.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import orjson

from streamanon.errors import BudgetSpentError, StreamanonError
from streamanon.service.states import OPEN, TRANSITIONS

log = logging.getLogger(__name__)

_SURVEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class StoreError(StreamanonError):
    """The store cannot do what was asked (bad URL, illegal state transition, ...)."""


class IllegalMove(StoreError):
    """A state transition :data:`~streamanon.service.states.TRANSITIONS` does not allow from
    the survey's stored state (or not from the state the caller expected)."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or cannot write now (connection lost, server down, disk
    full); the operation did not happen and may be retried later. The message is fixed text,
    never a value."""


@dataclass(frozen=True)
class SurveyState:
    survey: str
    state: str
    close_requested_at: float | None
    base_started_at: float | None
    updated_at: float
    error: str | None


class RecordRow(NamedTuple):
    """One validated record as the collector hands it to the store (a tuple: the hot path
    passes these straight to the database driver)."""

    arrived_at: float
    partition: int
    offset: int
    rid_hash: bytes
    digest: bytes  # record_digest(qi, confidential, label)
    qi: bytes
    confidential: str
    label: str | None


_DIGEST = hashlib.blake2b(digest_size=16, person=b"streamanon-rec1")
_NO_LABEL = b"\xff" * 8


def record_digest(qi: bytes, confidential: str, label: str | None) -> bytes:
    """128-bit BLAKE2b of what is stored of a response: its quasi-identifier bytes, its
    confidential values as JSON and its label, each part length-prefixed (so no two different
    records share an encoding; a missing label differs from an empty one)."""
    h = _DIGEST.copy()  # the personalised state, prepared once
    text = confidential.encode()
    h.update(len(qi).to_bytes(8, "little") + qi + len(text).to_bytes(8, "little") + text)
    if label is None:
        h.update(_NO_LABEL)
    else:
        tag = label.encode()
        h.update(len(tag).to_bytes(8, "little") + tag)
    return h.digest()


@dataclass(frozen=True)
class Records:
    seq: np.ndarray
    arrived_at: np.ndarray
    qi: np.ndarray  # n x m float64
    confidential: list[dict[str, Any]]
    labels: list[str | None]

    def __len__(self) -> int:
        return int(self.seq.shape[0])

    def upto(self, seq: int) -> Records:
        """Those of these records with ``seq`` at most ``seq`` (they are in ``seq`` order)."""
        n = int(np.searchsorted(self.seq, seq, side="right"))
        return Records(seq=self.seq[:n], arrived_at=self.arrived_at[:n], qi=self.qi[:n],
                       confidential=self.confidential[:n], labels=self.labels[:n])

    @staticmethod
    def join(parts: Sequence[Records]) -> Records:
        """The records of ``parts`` one after the other; each part's must follow the one's
        before (larger ``seq``)."""
        last = None
        for part in parts:
            if len(part) and last is not None and part.seq[0] <= last:
                raise ValueError("the later records must follow these: their seq is not larger")
            last = part.seq[-1] if len(part) else last
        return Records(seq=np.concatenate([p.seq for p in parts]),
                       arrived_at=np.concatenate([p.arrived_at for p in parts]),
                       qi=np.concatenate([p.qi for p in parts]),
                       confidential=[row for p in parts for row in p.confidential],
                       labels=[label for p in parts for label in p.labels])

@dataclass(frozen=True)
class Checkpoint:
    """The finished base run: records with seq <= snapshot_seq, their cells, their scaling."""

    snapshot_seq: int
    n_base: int
    labels: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    engine: str
    seconds: float
    started_at: float


@dataclass(frozen=True)
class ReleaseRow:
    release_id: str
    status: str  # "written" (files and report on disk) or "published" (topic done)
    seed: int
    report: dict[str, Any]


_RECORDS = """
CREATE TABLE IF NOT EXISTS records (
    seq {autoinc}, survey TEXT NOT NULL, arrived_at DOUBLE PRECISION NOT NULL,
    kafka_partition INTEGER NOT NULL, kafka_offset BIGINT NOT NULL, rid_hash {blob} NOT NULL,
    digest {blob} NOT NULL, qi {blob} NOT NULL, confidential TEXT NOT NULL, label TEXT{unique})"""
#: The records' identity constraint: kept by the database (PostgreSQL), or by the store object
#: when a unique index on random pseudonyms costs more than the rest of an insert (SQLite).
UNIQUE_IDENTITY = ",\n    UNIQUE (survey, rid_hash, digest)"
_RECORD_COLUMNS = ("seq, survey, arrived_at, kafka_partition, kafka_offset, rid_hash, digest, "
                   "qi, confidential, label")

# Every table, formatted by each backend with its autoincrementing key and its blob type.
SCHEMA = _RECORDS + """;
CREATE TABLE IF NOT EXISTS surveys (
    id TEXT PRIMARY KEY, state TEXT NOT NULL, close_requested_at DOUBLE PRECISION,
    base_started_at DOUBLE PRECISION, updated_at DOUBLE PRECISION NOT NULL, error TEXT);
CREATE TABLE IF NOT EXISTS transitions (
    survey TEXT NOT NULL, from_state TEXT NOT NULL, to_state TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL, note TEXT);
CREATE TABLE IF NOT EXISTS checkpoints (
    survey TEXT PRIMARY KEY, snapshot_seq BIGINT NOT NULL, n_base BIGINT NOT NULL,
    labels {blob} NOT NULL, mean {blob} NOT NULL, scale {blob} NOT NULL, engine TEXT NOT NULL,
    seconds DOUBLE PRECISION NOT NULL, started_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS releases (
    survey TEXT PRIMARY KEY, release_id TEXT NOT NULL, status TEXT NOT NULL,
    seed BIGINT NOT NULL, report TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS privacy_spent (
    survey TEXT NOT NULL, release_id TEXT NOT NULL, epsilon DOUBLE PRECISION NOT NULL,
    at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS out_of_domain_refused (
    survey TEXT PRIMARY KEY, first_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS close_marks (
    survey TEXT NOT NULL, kafka_partition INTEGER NOT NULL, kafka_offset BIGINT NOT NULL,
    PRIMARY KEY (survey, kafka_partition));
"""


class Store(ABC):
    """The store interface: call from any thread. Transactions take the store's lock; SQLite
    shares one connection behind it, PostgreSQL takes connections from a pool."""

    placeholder = "?"

    def __init__(self) -> None:
        self._lock = threading.RLock()

    # -- backend hooks -------------------------------------------------------------------------
    @abstractmethod
    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    @abstractmethod
    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """Run ``sql`` for every row; return the number of rows changed."""

    @abstractmethod
    def _transaction(self) -> Any: ...

    @abstractmethod
    def close(self) -> None: ...

    @abstractmethod
    def _record_columns(self) -> set[str]:
        """The columns of the records table as it is in the database."""

    def _upgrade(self, autoinc: str, blob: str, unique: str = UNIQUE_IDENTITY) -> None:
        """Bring a records table of an earlier version (unique by Kafka partition and offset,
        no digest) to the current one: the rows are copied with their sequence numbers, their
        digests computed, in one transaction; a crash leaves the old table as it was."""
        if "digest" in self._record_columns():
            return
        log.info("upgrading the store's records table (identity de-duplication)")
        with self._lock, self._transaction():
            self._q("ALTER TABLE records RENAME TO records_v1")
            self._q("DROP INDEX IF EXISTS records_pseudonym")
            self._q(_RECORDS.format(autoinc=autoinc, blob=blob, unique=unique))
            last = 0
            while True:
                rows = self._q("SELECT seq, survey, arrived_at, kafka_partition, kafka_offset, "
                               "rid_hash, qi, confidential, label FROM records_v1 WHERE seq > ? "
                               "ORDER BY seq LIMIT 5000", (last,))
                if not rows:
                    break
                self._executemany(self._sql(
                    f"INSERT INTO records ({_RECORD_COLUMNS}) VALUES ({', '.join('?' * 10)}) "
                    "ON CONFLICT DO NOTHING"),
                    [(seq, sv, at, part, off, bytes(rid),
                      record_digest(bytes(qi), conf, label), bytes(qi), conf, label)
                     for seq, sv, at, part, off, rid, qi, conf, label in rows])
                last = rows[-1][0]
            self._q("DROP TABLE records_v1")
            self._after_upgrade()

    def _lock_ledger(self, survey: str) -> None:  # noqa: B027 - a hook: nothing for SQLite
        """Inside a write transaction, before the ledger of ``survey`` is read: hold, until
        the transaction ends, a lock that every other spend on ``survey`` (from any process)
        must take first. SQLite's write transactions (``BEGIN IMMEDIATE``) already exclude
        each other on the whole file."""

    def _after_upgrade(self) -> None:  # noqa: B027 - a hook: nothing to do for SQLite
        """Backend follow-up of :meth:`_upgrade` (inside its transaction)."""

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self.placeholder)

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._execute(self._sql(sql), params)

    # -- surveys -------------------------------------------------------------------------------
    def ensure_survey(self, survey: str) -> SurveyState:
        # ON CONFLICT: several instances start at once, and another may insert in between
        with self._lock, self._transaction():
            if not self._q("SELECT 1 FROM surveys WHERE id = ?", (survey,)):
                self._q("INSERT INTO surveys (id, state, updated_at) VALUES (?, ?, ?) "
                        "ON CONFLICT DO NOTHING", (survey, OPEN, time.time()))
        return self.survey_state(survey)

    def survey_state(self, survey: str) -> SurveyState:
        rows = self._q("SELECT id, state, close_requested_at, base_started_at, updated_at, error "
                       "FROM surveys WHERE id = ?", (survey,))
        if not rows:
            raise StoreError(f"unknown survey {survey!r}")
        return SurveyState(*rows[0])

    def transition(self, survey: str, to_state: str, note: str = "", *,
                   expect: Iterable[str] | None = None, **fields: Any) -> SurveyState:
        """Move ``survey`` to ``to_state`` if the move is legal (and the current state is in
        ``expect`` when given); also set ``fields`` (columns of ``surveys``). Atomic."""
        allowed_fields = {"close_requested_at", "base_started_at", "error"}
        if set(fields) - allowed_fields:
            raise StoreError(f"cannot set {sorted(set(fields) - allowed_fields)}")
        with self._lock, self._transaction():
            current = self.survey_state(survey).state
            if to_state not in TRANSITIONS[current] or (expect and current not in set(expect)):
                allowed = sorted(TRANSITIONS[current]) or "none"
                raise IllegalMove(f"survey {survey}: illegal transition {current} -> {to_state} "
                                  f"(allowed: {allowed})")
            now = time.time()
            sets = ", ".join(f"{name} = ?" for name in fields)
            self._q(f"UPDATE surveys SET state = ?, updated_at = ?{', ' if sets else ''}{sets} "
                    "WHERE id = ?", (to_state, now, *fields.values(), survey))
            self._q("INSERT INTO transitions (survey, from_state, to_state, at, note) "
                    "VALUES (?, ?, ?, ?, ?)", (survey, current, to_state, now, note))
        log.info("survey %s: state transition %s -> %s (%s)", survey, current, to_state, note,
                 extra={"survey": survey, "from_state": current, "state": to_state,
                        "note": note})
        return self.survey_state(survey)

    def request_close(self, survey: str, at: float | None = None) -> SurveyState:
        """Stop accepting records for ``survey`` (idempotent: keeps the first moment)."""
        with self._lock, self._transaction():
            self._q("UPDATE surveys SET close_requested_at = ?, updated_at = ? "
                    "WHERE id = ? AND close_requested_at IS NULL",
                    (at or time.time(), time.time(), survey))
        return self.survey_state(survey)

    def save_close_marks(self, survey: str, marks: dict[int, int]) -> dict[int, int]:
        """Keep ``marks`` ({partition: end offset at the close}) unless the survey has marks
        already (the first close wins, as with ``close_requested_at``); return the kept ones."""
        with self._lock, self._transaction():
            if not self.close_marks(survey):
                for partition, offset in sorted(marks.items()):
                    self._q("INSERT INTO close_marks (survey, kafka_partition, kafka_offset) "
                            "VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                            (survey, int(partition), int(offset)))
        return self.close_marks(survey) or {}

    def close_marks(self, survey: str) -> dict[int, int] | None:
        """{partition: end offset} taken at the survey's close, or None before its close."""
        rows = self._q("SELECT kafka_partition, kafka_offset FROM close_marks WHERE survey = ?",
                       (survey,))
        return {int(p): int(o) for p, o in rows} or None

    def set_error(self, survey: str, error: str | None) -> None:
        with self._lock, self._transaction():
            self._q("UPDATE surveys SET error = ?, updated_at = ? WHERE id = ?",
                    (error, time.time(), survey))

    def transitions(self, survey: str) -> list[tuple[str, str, float, str]]:
        return [tuple(r) for r in self._q(
            "SELECT from_state, to_state, at, note FROM transitions WHERE survey = ? "
            "ORDER BY at", (survey,))]

    # -- records -------------------------------------------------------------------------------
    def insert_records(self, survey: str, rows: Sequence[RecordRow | tuple[Any, ...]]) -> int:
        """Store ``rows`` (:class:`RecordRow`, or plain tuples laid out as one) in one
        transaction, in their order (their ``seq`` increases along them); a row whose
        identity (respondent, digest) is stored already, or comes earlier in ``rows``, is
        skipped. Returns how many were new.

        A batch insert, not a statement per row: multi-row ``INSERT`` statements on SQLite,
        ``COPY`` into a staging table on PostgreSQL."""
        if not rows:
            return 0
        if not _SURVEY_ID.fullmatch(survey):
            raise StoreError(f"invalid survey id {survey!r}")
        with self._lock, self._transaction():  # the id is checked above: safe as a literal
            return self._insert_rows(survey, rows)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction for several :meth:`insert_records` (and the reads between them),
        from one thread: all of them are committed, or none (the collector's chunks of one
        batch)."""
        with self._lock, self._transaction():
            yield

    def load_identities(self) -> None:  # noqa: B027 - a hook: the database keeps them
        """Prepare for inserts: a backend that keeps the stored records' identities in
        memory (SQLite) reads them now; the ingest worker calls it when it starts."""

    @abstractmethod
    def _insert_rows(self, survey: str, rows: Sequence[RecordRow | tuple[Any, ...]]) -> int:
        """Insert-or-skip ``rows`` of ``survey`` (a checked id) inside the caller's
        transaction; the number of rows inserted."""

    def respondents(self, survey: str, hashes: Sequence[bytes]) -> dict[bytes, set[bytes]]:
        """Stored respondent hashes among ``hashes``, each with the digests of its stored
        records."""
        found: dict[bytes, set[bytes]] = {}
        unique = list(dict.fromkeys(hashes))
        for start in range(0, len(unique), 2000):
            chunk = unique[start:start + 2000]
            marks = ", ".join("?" * len(chunk))
            for rid, digest in self._q(
                    "SELECT rid_hash, digest FROM records WHERE "
                    f"survey = ? AND rid_hash IN ({marks})", (survey, *chunk)):
                found.setdefault(bytes(rid), set()).add(bytes(digest))
        return found

    def count(self, survey: str) -> int:
        return int(self._q("SELECT COUNT(*) FROM records WHERE survey = ?", (survey,))[0][0])

    def max_seq(self, survey: str) -> int:
        value = self._q("SELECT MAX(seq) FROM records WHERE survey = ?", (survey,))[0][0]
        return int(value) if value is not None else 0

    def arrival_times(self, survey: str) -> np.ndarray:
        where, params = self._records_where(survey, 0, None)
        rows = self._q(f"SELECT arrived_at FROM records WHERE {where} ORDER BY seq", params)
        return np.array([r[0] for r in rows], dtype=np.float64)

    def _records_where(self, survey: str, after_seq: int,
                       upto_seq: int | None) -> tuple[str, list[Any]]:
        """The condition of :meth:`load_records` and its parameters (a backend may choose how
        its database reads them)."""
        if upto_seq is None:
            return "survey = ? AND seq > ?", [survey, after_seq]
        return "survey = ? AND seq > ? AND seq <= ?", [survey, after_seq, upto_seq]

    def load_records(self, survey: str, m: int, *, after_seq: int = 0,
                     upto_seq: int | None = None) -> Records:
        """Records with ``after_seq < seq <= upto_seq``, in arrival order."""
        where, params = self._records_where(survey, after_seq, upto_seq)
        rows = self._q("SELECT seq, arrived_at, qi, confidential, label FROM records "
                       f"WHERE {where} ORDER BY seq", params)
        qi = np.frombuffer(b"".join(bytes(r[2]) for r in rows), dtype=np.float64)
        return Records(
            seq=np.array([r[0] for r in rows], dtype=np.int64),
            arrived_at=np.array([r[1] for r in rows], dtype=np.float64),
            qi=qi.reshape(len(rows), m).copy(),
            confidential=[orjson.loads(r[3]) for r in rows],
            labels=[r[4] for r in rows],
        )

    # -- checkpoints ---------------------------------------------------------------------------
    def save_checkpoint(self, survey: str, cp: Checkpoint) -> None:
        with self._lock, self._transaction():
            self._q("DELETE FROM checkpoints WHERE survey = ?", (survey,))
            self._q("INSERT INTO checkpoints (survey, snapshot_seq, n_base, labels, mean, scale, "
                    "engine, seconds, started_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (survey, cp.snapshot_seq, cp.n_base,
                     np.asarray(cp.labels, dtype=np.int64).tobytes(),
                     np.asarray(cp.mean, dtype=np.float64).tobytes(),
                     np.asarray(cp.scale, dtype=np.float64).tobytes(), cp.engine, cp.seconds,
                     cp.started_at))

    def load_checkpoint(self, survey: str) -> Checkpoint | None:
        rows = self._q("SELECT snapshot_seq, n_base, labels, mean, scale, engine, seconds, "
                       "started_at FROM checkpoints WHERE survey = ?", (survey,))
        if not rows:
            return None
        seq, n_base, labels, mean, scale, engine, seconds, started = rows[0]
        return Checkpoint(int(seq), int(n_base),
                          np.frombuffer(bytes(labels), dtype=np.int64).copy(),
                          np.frombuffer(bytes(mean), dtype=np.float64).copy(),
                          np.frombuffer(bytes(scale), dtype=np.float64).copy(),
                          engine, float(seconds), float(started))

    # -- releases ------------------------------------------------------------------------------
    def save_release(self, survey: str, row: ReleaseRow) -> None:
        with self._lock, self._transaction():
            self._q("DELETE FROM releases WHERE survey = ?", (survey,))
            self._q("INSERT INTO releases (survey, release_id, status, seed, report, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (survey, row.release_id, row.status, row.seed, json.dumps(row.report),
                     time.time()))

    def spend_privacy(self, survey: str, release_id: str, epsilon: float,
                      budget: float) -> float:
        """Record that release ``release_id`` of ``survey`` spends ``epsilon`` of the survey's
        privacy budget, before any of its noisy values leaves the process (a release drawn and
        lost in a crash counts as spent: nobody can tell it was not seen); raises
        :class:`BudgetSpentError`, recording nothing, when less than ``epsilon`` of ``budget``
        is left. Returns what is spent with it.

        Atomic across processes, not only across the threads of this store object: the
        transaction first takes the backend's lock on the survey's ledger
        (:meth:`_lock_ledger`), so two service instances on one database never both read the
        same sum and both pay from it."""
        with self._lock, self._transaction():
            self._lock_ledger(survey)
            rows = self._q("SELECT COALESCE(SUM(epsilon), 0), COUNT(*) FROM privacy_spent "
                           "WHERE survey = ?", (survey,))
            spent, releases = float(rows[0][0]), int(rows[0][1])
            if spent + epsilon > budget * (1 + 1e-9):
                raise BudgetSpentError(
                    f"survey {survey}: a release with epsilon = {epsilon:g} would spend "
                    f"{spent + epsilon:g} of its privacy budget of {budget:g} ({spent:g} "
                    f"spent by {releases} release(s) drawn before); raise epsilon_budget "
                    "to allow it, knowing that every release adds to what they tell together")
            self._q("INSERT INTO privacy_spent (survey, release_id, epsilon, at) VALUES "
                    "(?, ?, ?, ?)", (survey, release_id, epsilon, time.time()))
            return spent + epsilon

    def note_refused(self, survey: str) -> None:
        """Record that ``survey`` (``out_of_domain = "refuse"``) dead-lettered an answer
        outside its declared domain: every intake (each instance's collector, the webhook)
        notes it here, and the release reads it (:meth:`refused`), whatever restarted since.
        A flag: noting it again changes nothing."""
        with self._lock, self._transaction():
            self._q("INSERT INTO out_of_domain_refused (survey, first_at) VALUES (?, ?) "
                    "ON CONFLICT DO NOTHING", (survey, time.time()))

    def refused(self, survey: str) -> bool:
        """Whether an answer of ``survey`` outside its declared domain was refused
        (:meth:`note_refused`)."""
        return bool(self._q("SELECT 1 FROM out_of_domain_refused WHERE survey = ?", (survey,)))

    def privacy_spent(self, survey: str) -> float:
        """The epsilon the releases of ``survey`` have spent in all."""
        rows = self._q("SELECT COALESCE(SUM(epsilon), 0) FROM privacy_spent WHERE survey = ?",
                       (survey,))
        return float(rows[0][0])

    def load_release(self, survey: str) -> ReleaseRow | None:
        rows = self._q("SELECT release_id, status, seed, report FROM releases WHERE survey = ?",
                       (survey,))
        if not rows:
            return None
        rid, status, seed, report = rows[0]
        return ReleaseRow(rid, status, int(seed), json.loads(report))

