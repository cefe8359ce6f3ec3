"""The SQLite backend of the store: one file in WAL mode, private to its owner (mode 0600),
one connection shared by the threads behind the store's lock.

It may import the standard library (``sqlite3``) and :mod:`.base`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any

from streamanon.service.store.base import SCHEMA, RecordRow, Store, StoreUnavailable

#: The connection's settings (also those of ``simulations.bench_store_index``).
PRAGMAS = (
    "journal_mode=WAL",
    "synchronous=FULL",  # committed means on disk
    "busy_timeout=10000",
    "cache_size=-262144",
    "mmap_size=1073741824",
    # Checkpoint every 20,000 WAL pages (80 MB), not every 1,000: fewer checkpoints write a
    # hot page once for several batches (a store made before the identities were kept in
    # memory has a unique index on random pseudonyms, whose batches dirty pages all over it).
    "wal_autocheckpoint=20000",
)


class Identities:
    """The identity (respondent pseudonym, record digest) of every stored record, by survey,
    as of ``seq``: what the unique index of the records table would hold, kept in memory.

    SQLite's unique index on random 128-bit pseudonyms made an insert cost 6.9 us a row at
    400,000 rows and 20.9 us at 2,000,000 (each batch dirties about a page of the index per
    row, written to the WAL at commit), against 2.9-3.1 us without it
    (``simulations.bench_store_index``). In memory about 140 bytes a record (140 MB at a
    million)."""

    def __init__(self) -> None:
        self.seq = 0
        self._by_survey: dict[str, dict[bytes, bytes | set[bytes]]] = {}

    def add(self, survey: str, rid: bytes, digest: bytes) -> bool:
        """Note a record's identity; False when it is noted already."""
        known = self._by_survey.setdefault(survey, {})
        held = known.get(rid)
        if held is None:
            known[rid] = digest
        elif isinstance(held, set):
            if digest in held:
                return False
            held.add(digest)
        elif held == digest:
            return False
        else:
            known[rid] = {held, digest}
        return True

    def digests(self, survey: str, rid: bytes) -> set[bytes]:
        """The digests of the stored records of the respondent ``rid``."""
        held = self._by_survey.get(survey, {}).get(rid)
        return set() if held is None else held.copy() if isinstance(held, set) else {held}


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
            for pragma in PRAGMAS:
                self._conn.execute(f"PRAGMA {pragma}")
        finally:
            os.umask(old)
        self._depth = 0
        with self._lock:
            self._conn.executescript(SCHEMA.format(  # rowid: increasing, no deletes
                autoinc="INTEGER PRIMARY KEY", blob="BLOB", unique=""))
            self._upgrade(autoinc="INTEGER PRIMARY KEY", blob="BLOB")
            self._conn.execute("CREATE INDEX IF NOT EXISTS records_survey ON records "
                               "(survey, seq)")  # after the upgrade: on the table it made
        self._ids: Identities | None = None  # loaded by the first insert or lookup

    def _records_where(self, survey: str, after_seq: int,
                       upto_seq: int | None) -> tuple[str, list[Any]]:
        """A survey that fills at least a quarter of the seq range is read along the primary
        key (``+survey`` keeps SQLite off the survey's index): one sequential pass, already in
        seq order. Through the index SQLite looks every row up in the table (three times
        slower for a million records, measured with the unique index it had then). A survey
        with few records in the range keeps the index."""
        where, params = super()._records_where(survey, after_seq, upto_seq)
        # the range's top only chooses the read: a load without upto_seq keeps no upper bound,
        # so a record stored after it is read too
        high = upto_seq if upto_seq is not None else (
            self._q("SELECT MAX(seq) FROM records")[0][0] or 0)
        count = self._q("SELECT COUNT(*) FROM records WHERE survey = ? AND seq > ? AND seq <= ?",
                        (survey, after_seq, high))[0][0]
        return ("+" + where if high > after_seq and 4 * int(count) >= high - after_seq
                else where), params

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
        """Inside the caller's write transaction (``BEGIN IMMEDIATE``: no other writer until
        it ends), so the identities brought up to date here stay so until the insert."""
        head = ("INSERT OR IGNORE INTO records (survey, arrived_at, kafka_partition, "
                "kafka_offset, rid_hash, digest, qi, confidential, label) VALUES ")
        one = f"('{survey}', ?, ?, ?, ?, ?, ?, ?, ?)"
        inserted = 0
        with self._lock, self._faults():
            try:
                ids = self._identities()
                rows = [row for row in rows if ids.add(survey, row[3], row[4])]
                for start in range(0, len(rows), self.ROWS_PER_INSERT):
                    chunk = rows[start:start + self.ROWS_PER_INSERT]
                    sql = head + ", ".join([one] * len(chunk))  # full size: a cached statement
                    inserted += self._conn.execute(
                        sql, list(chain.from_iterable(chunk))).rowcount
                ids.seq = self._conn.execute("SELECT MAX(seq) FROM records").fetchone()[0] or 0
            except BaseException:
                self._ids = None  # what was added may not be stored: read again when needed
                raise
        return inserted

    def respondents(self, survey: str, hashes: Sequence[bytes]) -> dict[bytes, set[bytes]]:
        with self._lock, self._faults():
            ids = self._identities()
            return {rid: digests for rid in dict.fromkeys(hashes)
                    if (digests := ids.digests(survey, rid))}

    def load_identities(self) -> None:
        """Read the stored identities now, outside any write transaction (a first insert
        would otherwise read them all while it holds the database's write lock)."""
        with self._lock, self._faults():
            self._identities()

    def _identities(self) -> Identities:
        """The identities of every stored record, read from the table the first time and
        then only those stored since (by another store object or process). Under the lock."""
        ids = self._ids if self._ids is not None else Identities()
        cursor = self._conn.execute(
            "SELECT seq, survey, rid_hash, digest FROM records WHERE seq > ? ORDER BY seq",
            (ids.seq,))
        while batch := cursor.fetchmany(100_000):
            for _, survey, rid, digest in batch:
                ids.add(survey, bytes(rid), bytes(digest))
            ids.seq = batch[-1][0]
        self._ids = ids
        return ids

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
                    committed = False
                    try:
                        with SQLiteStore._faults():
                            if not exc_type:
                                conn.execute("COMMIT")
                                committed = True
                            elif conn.in_transaction:
                                conn.execute("ROLLBACK")
                    except StoreUnavailable:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                    finally:
                        if not committed:  # rolled back (a failed COMMIT too): the
                            self.store._ids = None  # identities are read again
            finally:
                self.store._lock.release()

    def _transaction(self) -> Any:
        return SQLiteStore._Tx(self)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
