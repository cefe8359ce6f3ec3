"""The PostgreSQL backend of the store, for deployments with several collectors: the same
tables and semantics through psycopg 3 and a connection pool.

It may import the standard library and :mod:`.base`; psycopg and psycopg_pool are imported
when a :class:`PostgresStore` is made, so a SQLite deployment needs neither.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from streamanon.service.store.base import (
    SCHEMA,
    UNIQUE_IDENTITY,
    RecordRow,
    Store,
    StoreError,
    StoreUnavailable,
)

log = logging.getLogger(__name__)

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
                    schema = SCHEMA.format(autoinc="BIGSERIAL PRIMARY KEY", blob="BYTEA",
                                           unique=UNIQUE_IDENTITY)
                    for statement in schema.split(";"):
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

    #: The first key of the ledger's advisory locks (the second is the survey's hash): the
    #: two-key space, apart from the one-key lock of the schema's creation.
    LEDGER_LOCK = 7272

    def _lock_ledger(self, survey: str) -> None:
        """A transaction-level advisory lock on the survey, taken before its ledger is read.

        Under READ COMMITTED two transactions can both read the sum spent before either
        inserts, and the store's own lock only orders the threads of one process. The lock
        is released by the commit or the rollback, or by the server when the connection is
        lost, so a crashed instance never leaves it held; it needs no row to exist (a row
        lock would, and a survey's first spend has none) and no retry loop (SERIALIZABLE
        would fail one of two racing spends, to be tried again). Two surveys whose names
        hash alike only wait for each other."""
        self._q("SELECT pg_advisory_xact_lock(?, hashtext(?))", (self.LEDGER_LOCK, survey))

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
