"""Durable store of a deployment: records, survey states, base checkpoints, releases.

SQLite in WAL mode by default (one file, created with mode 0600), PostgreSQL through the same
interface for deployments with several collectors; :func:`open_store` picks by URL
(``sqlite:///path`` or ``postgresql://...``).

What is kept per record: arrival sequence (global, increasing) and time, the Kafka source
(partition and offset, for diagnosis only), an HMAC of the respondent id (never the id), a
digest of the stored content (:func:`record_digest`), the quasi-identifiers as float64 bytes,
the confidential values as JSON and the optional label. No identifier, no raw message.

A record's identity is (survey, respondent HMAC, content digest), unique in the table: a
redelivered response stores nothing twice wherever it comes from, and offsets that start again
(a broker that lost its log, a recreated topic, a new cluster) never make a fresh response look
like a redelivery. A store written by an earlier version (unique by partition and offset) is
upgraded when it is opened (:meth:`Store._upgrade`).

Survey states and their transitions (each one persisted, with a log)::

    OPEN -> BASE_RUNNING -> BASE_DONE -> CLOSING -> RELEASED
    OPEN -> CLOSING                    (closed before any base run)
    BASE_RUNNING -> OPEN               (a base run interrupted by a crash, to be re-planned)

``close_requested_at`` marks the moment a survey stopped accepting records; it can be set in
any state before RELEASED (a close during the base run waits for it). The close marks say where
in the log that moment falls: for each partition of the survey's response topic, the end offset
when the close was taken. A message below its partition's mark was on time; the drain before
the release waits for the committed offsets to reach the marks, after any restart.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlparse

import numpy as np
import orjson

from streamanon.errors import StreamanonError
from streamanon.service.states import (  # noqa: F401 - re-exported: the store's vocabulary
    BASE_DONE,
    BASE_RUNNING,
    CLOSING,
    OPEN,
    RELEASED,
    TRANSITIONS,
)

log = logging.getLogger(__name__)



_SURVEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class StoreError(StreamanonError):
    """The store cannot do what was asked (bad URL, illegal state transition, ...)."""


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
    digest {blob} NOT NULL, qi {blob} NOT NULL, confidential TEXT NOT NULL, label TEXT,
    UNIQUE (survey, rid_hash, digest))"""
_RECORD_COLUMNS = ("seq, survey, arrived_at, kafka_partition, kafka_offset, rid_hash, digest, "
                   "qi, confidential, label")

_SCHEMA = _RECORDS + """;
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

    def _upgrade(self, autoinc: str, blob: str) -> None:
        """Bring a records table of an earlier version (unique by Kafka partition and offset,
        no digest) to the current one: the rows are copied with their sequence numbers, their
        digests computed, in one transaction; a crash leaves the old table as it was."""
        if "digest" in self._record_columns():
            return
        log.info("upgrading the store's records table (identity de-duplication)")
        with self._lock, self._transaction():
            self._q("ALTER TABLE records RENAME TO records_v1")
            self._q("DROP INDEX IF EXISTS records_pseudonym")
            self._q(_RECORDS.format(autoinc=autoinc, blob=blob))
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

    def _after_upgrade(self) -> None:  # noqa: B027 - a hook: nothing to do for SQLite
        """Backend follow-up of :meth:`_upgrade` (inside its transaction)."""

    def _sql(self, sql: str) -> str:
        return sql.replace("?", self.placeholder)

    def _q(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._execute(self._sql(sql), params)

    # -- surveys -------------------------------------------------------------------------------
    def ensure_survey(self, survey: str) -> SurveyState:
        with self._lock, self._transaction():
            if not self._q("SELECT 1 FROM surveys WHERE id = ?", (survey,)):
                self._q("INSERT INTO surveys (id, state, updated_at) VALUES (?, ?, ?)",
                        (survey, OPEN, time.time()))
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
                raise StoreError(f"survey {survey}: illegal transition {current} -> {to_state}")
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
                            "VALUES (?, ?, ?)", (survey, int(partition), int(offset)))
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
        rows = self._q("SELECT arrived_at FROM records WHERE survey = ? ORDER BY seq", (survey,))
        return np.array([r[0] for r in rows], dtype=np.float64)

    def load_records(self, survey: str, m: int, *, after_seq: int = 0,
                     upto_seq: int | None = None) -> Records:
        """Records with ``after_seq < seq <= upto_seq``, in arrival order."""
        sql = ("SELECT seq, arrived_at, qi, confidential, label FROM records "
               "WHERE survey = ? AND seq > ?")
        params: list[Any] = [survey, after_seq]
        if upto_seq is not None:
            sql += " AND seq <= ?"
            params.append(upto_seq)
        rows = self._q(sql + " ORDER BY seq", params)
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

    def load_release(self, survey: str) -> ReleaseRow | None:
        rows = self._q("SELECT release_id, status, seed, report FROM releases WHERE survey = ?",
                       (survey,))
        if not rows:
            return None
        rid, status, seed, report = rows[0]
        return ReleaseRow(rid, status, int(seed), json.loads(report))


class SQLiteStore(Store):
    """SQLite in WAL mode; the database file and its WAL companions are private (0600)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            os.chmod(self.path, 0o600)
        old = os.umask(0o077)  # the -wal and -shm files SQLite creates are private too
        try:
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False,
                                         isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")  # committed means on disk
            self._conn.execute("PRAGMA busy_timeout=10000")
            # keep the indexes in memory: random 128-bit pseudonyms touch pages everywhere
            self._conn.execute("PRAGMA cache_size=-262144")
            self._conn.execute("PRAGMA mmap_size=1073741824")
            # Checkpoint every 20,000 WAL pages (80 MB), not every 1,000: a batch of random
            # pseudonyms dirties pages all over the unique index, and each checkpoint writes
            # them again; fewer checkpoints write a hot page once for several batches (the
            # commit costs about a third less per record at a million records, measured).
            self._conn.execute("PRAGMA wal_autocheckpoint=20000")
        finally:
            os.umask(old)
        self._depth = 0
        with self._lock:
            self._conn.executescript(_SCHEMA.format(
                autoinc="INTEGER PRIMARY KEY", blob="BLOB"))  # rowid: increasing, no deletes
            self._upgrade(autoinc="INTEGER PRIMARY KEY", blob="BLOB")

    # sqlite3.OperationalError texts of a store that cannot write now, whatever the statement
    _UNAVAILABLE = ("database or disk is full", "disk i/o error", "unable to open",
                    "database is locked")  # locked past busy_timeout: another writer holds it

    @staticmethod
    @contextmanager
    def _faults() -> Iterator[None]:
        """A full disk, an I/O failure or a file SQLite cannot open as
        :class:`StoreUnavailable` (retry later); other errors unchanged."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            reason = next((r for r in SQLiteStore._UNAVAILABLE if r in text), None)
            if reason is None:
                raise
            raise StoreUnavailable(f"the SQLite store cannot write now ({reason})") from None

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock, self._faults():
            return self._conn.execute(sql, tuple(params)).fetchall()

    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        with self._lock, self._faults():
            return self._conn.executemany(sql, rows).rowcount

    def _record_columns(self) -> set[str]:
        return {row[1] for row in self._q("PRAGMA table_info(records)")}

    # Rows per multi-row INSERT: one statement and one pass of the VM per few hundred rows
    # instead of per row (about 20 % less CPU per row than executemany, measured); 8 bound
    # values per row stay far below the 32,766 variables of any SQLite since 3.32.
    ROWS_PER_INSERT = 500

    def _insert_rows(self, survey: str, rows: Sequence[RecordRow | tuple[Any, ...]]) -> int:
        head = ("INSERT OR IGNORE INTO records (survey, arrived_at, kafka_partition, "
                "kafka_offset, rid_hash, digest, qi, confidential, label) VALUES ")
        one = f"('{survey}', ?, ?, ?, ?, ?, ?, ?, ?)"
        inserted = 0
        with self._lock, self._faults():
            for start in range(0, len(rows), self.ROWS_PER_INSERT):
                chunk = rows[start:start + self.ROWS_PER_INSERT]
                sql = head + ", ".join([one] * len(chunk))  # the full size: a cached statement
                inserted += self._conn.execute(sql, list(chain.from_iterable(chunk))).rowcount
        return inserted

    class _Tx:
        def __init__(self, store: SQLiteStore) -> None:
            self.store = store

        def __enter__(self) -> None:
            self.store._lock.acquire()
            try:
                if self.store._depth == 0:
                    with SQLiteStore._faults():
                        self.store._conn.execute("BEGIN IMMEDIATE")
            except BaseException:
                self.store._lock.release()
                raise
            self.store._depth += 1

        def __exit__(self, exc_type: Any, *_: Any) -> None:
            conn = self.store._conn
            try:
                self.store._depth -= 1
                if self.store._depth == 0:
                    # a full disk or an I/O error may have rolled the transaction back already
                    try:
                        with SQLiteStore._faults():
                            if not exc_type:
                                conn.execute("COMMIT")
                            elif conn.in_transaction:
                                conn.execute("ROLLBACK")
                    except StoreUnavailable:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
            finally:
                self.store._lock.release()

    def _transaction(self) -> Any:
        return SQLiteStore._Tx(self)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


_PG_UNAVAILABLE = ("the PostgreSQL store is unavailable (server down or restarting, or the "
                   "connection was lost): the call did not complete; retry later")


class _PgSession(threading.local):
    """What one thread holds of a :class:`PostgresStore`: the connection of its open
    transaction (or of the store's set-up), and how deep the transaction is nested."""

    conn: Any = None
    depth = 0
    stack: ExitStack | None = None


class PostgresStore(Store):
    """PostgreSQL through psycopg 3, same tables and semantics.

    Connections come from a pool (``psycopg_pool``): statements outside a transaction take
    one for the statement; a thread's outermost transaction holds one until it ends, and the
    transactions nested in it run on it. Each connection is checked as it leaves the pool, so
    one cut by a server restart or an administrator is replaced, not used. While the server
    cannot be reached the pool reconnects in the background with exponential backoff (1 s,
    doubling, each series of attempts given up after ``reconnect_timeout`` and started again
    by the next call), and a call waits at most ``timeout`` seconds for a connection before it
    raises :class:`StoreUnavailable`, as does a statement whose connection is lost; a
    transaction cut that way is rolled back by the server.

    Transactions of one process still take the store's lock, as on SQLite: records get their
    ``seq`` in the order they are committed (a snapshot by ``seq`` never misses a record
    committed later with a smaller one), and the read-then-write steps of the state machine
    stay atomic. Reads outside a transaction run in parallel on their own connections.
    """

    placeholder = "%s"

    def __init__(self, url: str, *, timeout: float = 5.0, reconnect_timeout: float = 5.0,
                 max_connections: int = 4) -> None:
        super().__init__()
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # pragma: no cover
            raise StoreError("PostgreSQL needs psycopg and psycopg-pool: "
                             "pip install 'psycopg[binary,pool]'") from exc
        self._lost = psycopg.OperationalError  # connection refused or lost, server shutting down
        self._session = _PgSession()
        try:
            # Bounded waits unless the URL says otherwise: a server that does not answer a
            # connect, or a peer gone without closing the connection (a network cut), is
            # given up after seconds, not after the system's TCP timeouts (hours).
            given = conninfo_to_dict(url)
            kwargs: dict[str, Any] = {"autocommit": True}
            for key, value in (("connect_timeout", max(2, round(timeout))),
                               ("keepalives_idle", 10), ("keepalives_interval", 5),
                               ("keepalives_count", 3), ("tcp_user_timeout", 30_000)):
                if key not in given:
                    kwargs[key] = value
            conn = psycopg.connect(url, **kwargs)
        except psycopg.Error as exc:  # the reason (refused, authentication) is for the operator
            raise StoreError(f"cannot connect to PostgreSQL: {str(exc).strip()}") from None
        self._session.conn = conn  # the set-up runs on this one: the advisory lock is its own
        try:
            with self._lock, self._reachable():
                conn.execute("SELECT pg_advisory_lock(727272)")  # schema creation, once
                try:
                    for statement in _SCHEMA.format(autoinc="BIGSERIAL PRIMARY KEY",
                                                    blob="BYTEA").split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    self._upgrade(autoinc="BIGSERIAL PRIMARY KEY", blob="BYTEA")
                finally:
                    conn.execute("SELECT pg_advisory_unlock(727272)")
        finally:
            self._session.conn = None
            conn.close()
        self._pool = ConnectionPool(
            url, kwargs=kwargs, min_size=1, max_size=max_connections, open=True,
            check=self._check, timeout=timeout,
            reconnect_timeout=reconnect_timeout, name="streamanon-store")

    def _check(self, conn: Any) -> None:
        """The pool's check of a connection it hands out. When one was cut, the others idle
        in the pool most likely were too (a server restart): check them all at once rather
        than one by one, with the pool's backoff between them."""
        try:
            self._pool.check_connection(conn)
        except Exception:
            self._pool.check()
            raise

    @contextmanager
    def _reachable(self) -> Iterator[None]:
        """Turn a lost server into :class:`StoreUnavailable`, with fixed text: the driver's
        message is not passed on (a server's message can quote the data of a statement)."""
        try:
            yield
        except self._lost as exc:
            log.warning("PostgreSQL store unavailable (%s)", type(exc).__name__)
            raise StoreUnavailable(_PG_UNAVAILABLE) from None

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        """This thread's connection: the one of its open transaction, or one from the pool
        for as long as the block lasts."""
        if self._session.conn is not None:
            yield self._session.conn
            return
        conn = self._pool.getconn()  # waits at most `timeout`, then PoolTimeout
        self._session.conn = conn
        try:
            yield conn
        finally:
            self._session.conn = None
            self._pool.putconn(conn)  # a broken connection is discarded and replaced

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._reachable(), self._connection() as conn:
            cur = conn.execute(sql, tuple(params))
            return cur.fetchall() if cur.description else []

    def _executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        with self._reachable(), self._connection() as conn, conn.cursor() as cur:
            cur.executemany(sql, list(rows))
            return cur.rowcount

    def _record_columns(self) -> set[str]:
        return {row[0] for row in self._q(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'records' "
            "AND table_schema = current_schema()")}

    def _after_upgrade(self) -> None:
        self._q("SELECT setval(pg_get_serial_sequence('records', 'seq'), "
                "GREATEST((SELECT MAX(seq) FROM records), 1))")

    # The staging table of :meth:`_insert_rows`: private to the connection, emptied at commit.
    _STAGING = ("CREATE TEMP TABLE IF NOT EXISTS records_in (position BIGINT NOT NULL, "
                "arrived_at DOUBLE PRECISION NOT NULL, kafka_partition INTEGER NOT NULL, "
                "kafka_offset BIGINT NOT NULL, rid_hash BYTEA NOT NULL, digest BYTEA NOT NULL, "
                "qi BYTEA NOT NULL, confidential TEXT NOT NULL, label TEXT) "
                "ON COMMIT DELETE ROWS")
    _STAGING_TYPES = ("int8", "float8", "int4", "int8", "bytea", "bytea", "bytea", "text",
                      "text")

    def _insert_rows(self, survey: str, rows: Sequence[RecordRow | tuple[Any, ...]]) -> int:
        """``COPY`` (binary) into a temporary staging table, then one ``INSERT ... SELECT
        ... ON CONFLICT DO NOTHING`` in the rows' order: the rows cross the network in one
        stream rather than as a statement each, and the unique index still decides what is
        new. The staging table is emptied when the transaction commits or rolls back."""
        with self._reachable(), self._connection() as conn, conn.cursor() as cur:
            cur.execute(self._STAGING)
            with cur.copy("COPY records_in (position, arrived_at, kafka_partition, "
                          "kafka_offset, rid_hash, digest, qi, confidential, label) "
                          "FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(self._STAGING_TYPES)
                for position, row in enumerate(rows):
                    copy.write_row((position, *row))
            cur.execute("INSERT INTO records (survey, arrived_at, kafka_partition, "
                        "kafka_offset, rid_hash, digest, qi, confidential, label) "
                        "SELECT %s, arrived_at, kafka_partition, kafka_offset, rid_hash, "
                        "digest, qi, confidential, label FROM records_in ORDER BY position "
                        "ON CONFLICT DO NOTHING", (survey,))
            inserted = cur.rowcount
            if self._session.depth > 1:  # the commit empties it, unless this is nested
                cur.execute("DELETE FROM records_in")
            return inserted

    class _Tx:
        """The outermost transaction of a thread holds a connection until it ends; nested
        ones join it. A failure anywhere in it rolls all of it back."""

        def __init__(self, store: PostgresStore) -> None:
            self.store = store

        def __enter__(self) -> None:
            session = self.store._session
            if session.depth == 0:
                with self.store._reachable():
                    stack = ExitStack()
                    try:
                        conn = stack.enter_context(self.store._connection())
                        stack.enter_context(conn.transaction())
                    except BaseException:
                        stack.close()
                        raise
                session.stack = stack
            session.depth += 1

        def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
            session = self.store._session
            session.depth -= 1
            if session.depth == 0:
                stack, session.stack = session.stack, None
                assert stack is not None
                with self.store._reachable():  # a COMMIT that cannot reach the server
                    stack.__exit__(exc_type, exc, tb)

    def _transaction(self) -> Any:
        return PostgresStore._Tx(self)

    def close(self) -> None:
        self._pool.close()


def open_store(url: str) -> Store:
    """``sqlite:///relative.db``, ``sqlite:////absolute/path.db``, ``sqlite:///:memory:`` or
    ``postgresql://...``."""
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = url[len("sqlite:///"):] if url.startswith("sqlite:///") else parsed.path
        if not path:
            raise StoreError(f"store URL {url!r}: give a file, e.g. sqlite:///streamanon.db")
        return SQLiteStore(path)
    if parsed.scheme in ("postgresql", "postgres"):
        return PostgresStore(url)
    raise StoreError(f"store URL {url!r}: use sqlite:///FILE or postgresql://...")
