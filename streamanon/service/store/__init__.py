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

Survey states and their legal moves are :mod:`streamanon.service.states`; the store persists
each transition, with a log. ``close_requested_at`` marks the moment a survey stopped accepting
records; it can be set in any state before RELEASED (a close during the base run waits for
it). The close marks say where in the log that moment falls: for each partition of the
survey's response topic, the end offset when the close was taken. A message below its
partition's mark was on time; the drain before the release waits for the committed offsets to
reach the marks, after any restart.

The modules: :mod:`.base` (the interface, the rows, the errors, the tables, the digest),
:mod:`.sqlite` and :mod:`.postgres` (the backends). This package is the public path: other
modules import from ``streamanon.service.store``, not from its modules. It may import its
modules and the standard library; the PostgreSQL driver is loaded only by a
:class:`PostgresStore`.
"""

from __future__ import annotations

from urllib.parse import urlparse

from streamanon.service.store.base import (
    Checkpoint,
    IllegalMove,
    RecordRow,
    Records,
    ReleaseRow,
    Store,
    StoreError,
    StoreUnavailable,
    SurveyState,
    record_digest,
)
from streamanon.service.store.postgres import PostgresStore
from streamanon.service.store.sqlite import SQLiteStore

__all__ = [
    "Checkpoint", "IllegalMove", "PostgresStore", "RecordRow", "Records", "ReleaseRow",
    "SQLiteStore", "Store", "StoreError", "StoreUnavailable", "SurveyState", "open_store",
    "record_digest",
]


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
