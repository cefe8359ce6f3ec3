"""The store: the same behaviour on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import os
import sqlite3
import sys
import threading

import numpy as np
import pytest

from streamanon.service.states import BASE_DONE, BASE_RUNNING, CLOSING, OPEN, RELEASED
from streamanon.service.store import (
    Checkpoint,
    RecordRow,
    ReleaseRow,
    SQLiteStore,
    StoreError,
    StoreUnavailable,
    open_store,
    record_digest,
)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db' / 'store.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(store_url):
    s = open_store(store_url)
    if not store_url.startswith("sqlite"):
        s._q("DELETE FROM records")
        for table in ("surveys", "transitions", "checkpoints", "releases", "close_marks"):
            s._q(f"DELETE FROM {table}")
    yield s
    s.close()


def rows(n, start=0, m=3):
    return [RecordRow(arrived_at=1000.0 + i, partition=0, offset=i, rid_hash=i.to_bytes(32, "big"),
                      digest=record_digest(np.full(m, float(i)).tobytes(), f'{{"v": {i}}}', None),
                      qi=np.full(m, float(i)).tobytes(), confidential=f'{{"v": {i}}}',
                      label=None) for i in range(start, start + n)]


def test_inserts_are_idempotent_by_identity(store):
    store.ensure_survey("s")
    assert store.insert_records("s", rows(100)) == 100
    assert store.insert_records("s", rows(10, start=95)) == 5  # 95..99 redelivered
    assert store.count("s") == 105
    recs = store.load_records("s", 3)
    assert recs.qi[:, 0].tolist() == [float(i) for i in range(105)]  # arrival order
    assert [c["v"] for c in recs.confidential] == list(range(105))
    # the partition and offset play no part: the same records read elsewhere are skipped,
    # other records at the same offsets are stored
    moved = [r._replace(partition=7, offset=r.offset + 10**6) for r in rows(5)]
    assert store.insert_records("s", moved) == 0
    fresh = [r._replace(rid_hash=b"x" + r.rid_hash[1:]) for r in rows(5)]
    assert store.insert_records("s", fresh) == 5
    assert store.count("s") == 110


def test_a_batch_insert_keeps_its_order_and_skips_known_and_repeated_rows(store):
    """insert_records is a batch insert (multi-row INSERT statements on SQLite, COPY into a
    staging table on PostgreSQL): more rows than one statement takes, rows stored before and
    rows twice in the batch (skipped), labels and plain tuples laid out as RecordRow."""
    store.ensure_survey("s")
    assert store.insert_records("s", rows(10, start=1000)) == 10
    labelled = [r._replace(label=f"L{r.offset}") for r in rows(600, start=3000)]
    batch = [*rows(600), *rows(3, start=1000), *labelled, *rows(5, start=7),
             *[tuple(r) for r in rows(2, start=2000)]]
    assert len(batch) > 2 * SQLiteStore.ROWS_PER_INSERT
    assert store.insert_records("s", batch) == 1202
    assert store.count("s") == 1212
    recs = store.load_records("s", 3)
    assert recs.qi[:, 0].tolist() == [float(i) for i in [
        *range(1000, 1010), *range(600), *range(3000, 3600), 2000, 2001]]
    assert bool(np.all(np.diff(recs.seq) > 0))
    assert recs.labels[10:610] == [None] * 600
    assert recs.labels[610:1210] == [f"L{i}" for i in range(3000, 3600)]
    assert [c["v"] for c in recs.confidential[-2:]] == [2000, 2001]


def test_batch_inserts_in_one_outer_transaction_commit_or_roll_back_together(store):
    store.ensure_survey("s")
    with store._lock, store._transaction():
        assert store.insert_records("s", rows(700)) == 700
        assert store.insert_records("s", rows(300, start=500)) == 100  # 500..699 known
    assert store.load_records("s", 3).qi[:, 0].tolist() == [float(i) for i in range(800)]
    with pytest.raises(RuntimeError), store._lock, store._transaction():
        assert store.insert_records("s", rows(50, start=900)) == 50
        raise RuntimeError("the batch failed after its insert")
    assert store.count("s") == 800
    assert store.insert_records("s", rows(50, start=900)) == 50  # nothing left staged
    assert store.count("s") == 850


def test_record_digest_is_the_length_prefixed_blake2b_it_always_was():
    """Digests stored by earlier versions must still match (a redelivery after an upgrade is
    recognised): BLAKE2b-128 personalised "streamanon-rec1" over each part with its length as
    8 little-endian bytes, a missing label as eight 0xff bytes (vectors from version 0.x)."""
    qi = np.arange(3.0).tobytes()
    assert {label: record_digest(qi, '{"v": 1}', label).hex() for label in (None, "", "x")} == {
        None: "66df4dc8312d048917f113bf5a9d966b", "": "d9c809666fe15917eaedbb4bca5e3e3f",
        "x": "ead0b3fe7bd20c067ccb18fed1a53ed1"}


_OLD_RECORDS = """
CREATE TABLE records (
    seq {autoinc}, survey TEXT NOT NULL, arrived_at DOUBLE PRECISION NOT NULL,
    kafka_partition INTEGER NOT NULL, kafka_offset BIGINT NOT NULL, rid_hash {blob} NOT NULL,
    qi {blob} NOT NULL, confidential TEXT NOT NULL, label TEXT,
    UNIQUE (survey, kafka_partition, kafka_offset))"""


def test_a_records_table_of_the_previous_version_is_upgraded(store, request):
    """Version 0.x kept records unique by (partition, offset), without digests."""
    postgres = not hasattr(store, "path")
    url = request.getfixturevalue("postgres_url") if postgres else f"sqlite:///{store.path}"
    store.ensure_survey("s")
    store._q("DROP TABLE records")
    store._q(_OLD_RECORDS.format(autoinc="BIGSERIAL PRIMARY KEY" if postgres else
                                 "INTEGER PRIMARY KEY", blob="BYTEA" if postgres else "BLOB"))
    store._q("CREATE INDEX records_pseudonym ON records (survey, rid_hash)")
    for r in rows(3, start=3):  # seq values are kept: checkpoints refer to them
        store._q("INSERT INTO records (seq, survey, arrived_at, kafka_partition, kafka_offset, "
                 "rid_hash, qi, confidential, label) VALUES (?, 's', ?, ?, ?, ?, ?, ?, ?)",
                 (r.offset * 2, r.arrived_at, r.partition, r.offset, r.rid_hash, r.qi,
                  r.confidential, r.label))
    store.close()
    upgraded = open_store(url)
    try:
        assert upgraded.load_records("s", 3).seq.tolist() == [6, 8, 10]
        assert upgraded.respondents("s", [r.rid_hash for r in rows(3, start=3)]) == {
            r.rid_hash: {r.digest} for r in rows(3, start=3)}
        # the same content again is recognised; other content at an old offset is stored
        new = rows(1, start=3)[0]._replace(rid_hash=b"n" * 32)
        assert upgraded.insert_records("s", [*rows(3, start=3), new]) == 1
        assert upgraded.max_seq("s") > 10  # after the old ones (PostgreSQL may skip some)
        if not postgres:  # the index by survey is on the upgraded table, not the old one
            assert upgraded._q("SELECT tbl_name FROM sqlite_master WHERE name = "
                               "'records_survey'") == [("records",)]
    finally:
        upgraded.close()
    again = open_store(url)  # opening an upgraded store changes nothing
    assert again.count("s") == 4
    again.close()


def test_respondents_lookup(store):
    store.ensure_survey("s")
    store.insert_records("s", rows(20))
    found = store.respondents("s", [i.to_bytes(32, "big") for i in (3, 5, 99)])
    assert found == {(i).to_bytes(32, "big"): {rows(1, start=i)[0].digest} for i in (3, 5)}


def test_snapshot_ranges(store):
    store.ensure_survey("s")
    store.insert_records("s", rows(50))
    cut = store.max_seq("s")
    store.insert_records("s", rows(20, start=50))
    assert len(store.load_records("s", 3, upto_seq=cut)) == 50
    assert len(store.load_records("s", 3, after_seq=cut)) == 20


def test_state_machine_persists_every_transition(store):
    store.ensure_survey("s")
    assert store.survey_state("s").state == OPEN
    store.transition("s", BASE_RUNNING, "snapshot", base_started_at=5.0)
    with pytest.raises(StoreError, match="illegal transition BASE_RUNNING -> RELEASED"):
        store.transition("s", RELEASED)
    store.transition("s", BASE_DONE)
    store.request_close("s", 7.0)
    store.request_close("s", 9.0)  # the first close moment is kept
    store.transition("s", CLOSING)
    store.transition("s", RELEASED)
    st = store.survey_state("s")
    assert (st.state, st.base_started_at, st.close_requested_at) == (RELEASED, 5.0, 7.0)
    assert [t[1] for t in store.transitions("s")] == [BASE_RUNNING, BASE_DONE, CLOSING, RELEASED]


def test_checkpoint_and_release_round_trip(store):
    store.ensure_survey("s")
    cp = Checkpoint(snapshot_seq=42, n_base=40, labels=np.arange(40) // 4,
                    mean=np.array([1.0, 2.0]), scale=np.array([3.0, 4.0]), engine="mdav",
                    seconds=1.5, started_at=99.0)
    store.save_checkpoint("s", cp)
    back = store.load_checkpoint("s")
    assert back.snapshot_seq == 42 and np.array_equal(back.labels, cp.labels)
    assert back.mean.tolist() == [1.0, 2.0] and back.engine == "mdav"
    store.save_release("s", ReleaseRow("abc", "written", 7, {"n": 40}))
    store.save_release("s", ReleaseRow("abc", "published", 7, {"n": 40}))
    assert store.load_release("s") == ReleaseRow("abc", "published", 7, {"n": 40})


def test_concurrent_writers_lose_nothing(store):
    store.ensure_survey("s")
    threads = [threading.Thread(target=store.insert_records, args=("s", rows(500, start=i * 500)))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.count("s") == 2000


def test_sqlite_file_and_wal_are_private(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    s.ensure_survey("s")
    s.insert_records("s", rows(5))
    for name in os.listdir(tmp_path):
        assert os.stat(tmp_path / name).st_mode & 0o777 == 0o600, name
    s.close()


def test_bad_urls():
    with pytest.raises(StoreError, match="use sqlite:///FILE or postgresql"):
        open_store("mysql://x")
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
        open_store("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")



def _not_seen_yet(store, monkeypatch, select: str) -> None:
    """Make ``store``'s next ``select`` find nothing: the interleaving of two instances
    starting at once, where this one looked before the other's insert was committed."""
    real = store._q

    def q(sql, params=()):
        if sql.startswith(select):
            monkeypatch.setattr(store, "_q", real)
            return []
        return real(sql, params)
    monkeypatch.setattr(store, "_q", q)


def test_two_instances_starting_at_once_both_ensure_the_survey(store, store_url, monkeypatch):
    other = open_store(store_url)
    try:
        other.ensure_survey("s")
        other.request_close("s", at=5.0)
        _not_seen_yet(store, monkeypatch, "SELECT 1 FROM surveys")
        state = store.ensure_survey("s")  # raised a unique violation: the start failed
        assert state.state == OPEN and state.close_requested_at == 5.0  # the row is not reset
    finally:
        other.close()


def test_two_instances_closing_at_once_keep_the_first_marks(store, store_url, monkeypatch):
    other = open_store(store_url)
    try:
        store.ensure_survey("s")
        assert other.save_close_marks("s", {0: 10, 1: 20}) == {0: 10, 1: 20}
        _not_seen_yet(store, monkeypatch, "SELECT kafka_partition, kafka_offset FROM close_marks")
        assert store.save_close_marks("s", {0: 11, 1: 21}) == {0: 10, 1: 20}
    finally:
        other.close()


def test_records_of_interleaved_surveys_load_in_arrival_order_whichever_way_they_are_read(
        store):
    """A survey's records are read by the range of their seq when they fill most of it (a
    sequential read, no sort: a million records read in a third of the time) and through the
    survey's index when they are few in it; both give the same records in arrival order."""
    store.ensure_survey("big")
    store.ensure_survey("small")
    for i in range(0, 400, 10):  # "small" takes one record in ten
        store.insert_records("big", rows(9, start=i))
        store.insert_records("small", rows(1, start=i + 9))
    big, small = store.load_records("big", 3), store.load_records("small", 3)
    assert big.qi[:, 0].tolist() == [float(i) for i in range(400) if i % 10 != 9]
    assert small.qi[:, 0].tolist() == [float(i) for i in range(9, 400, 10)]
    assert np.all(np.diff(big.seq) > 0) and np.all(np.diff(small.seq) > 0)
    cut = int(big.seq[200])
    after = store.load_records("big", 3, after_seq=cut)
    upto = store.load_records("big", 3, upto_seq=cut)
    assert after.seq.tolist() == big.seq[201:].tolist()
    assert upto.seq.tolist() == big.seq[:201].tolist()
    assert store.load_records("small", 3, after_seq=cut).seq.tolist() == [
        s for s in small.seq.tolist() if s > cut]
    if isinstance(store, SQLiteStore):  # which read each one takes
        assert store._records_where("big", 0, None)[0].startswith("+survey")
        assert store._records_where("small", 0, None)[0].startswith("survey")


def test_a_load_of_everything_after_a_seq_keeps_no_upper_bound(store):
    """The SQLite store reads the table's top seq to choose how to read a survey; that top is
    not a bound of the load: a record stored between the choice and the read is read too."""
    store.ensure_survey("s")
    store.insert_records("s", rows(40))
    where, params = store._records_where("s", 0, None)
    store.insert_records("s", rows(1, start=40))  # stored after the choice, before the read
    seqs = [row[0] for row in store._q(f"SELECT seq FROM records WHERE {where}", params)]
    assert len(seqs) == 41


def test_sqlite_identities_stored_by_another_store_object_are_recognised(tmp_path):
    """The SQLite store keeps the records' identities in memory (no unique index on random
    pseudonyms): records stored through another connection (another process) since are read
    before a lookup or an insert, so a redelivery through either is still skipped and a
    stored respondent still found."""
    path = tmp_path / "store.db"
    a, b = SQLiteStore(path), SQLiteStore(path)
    try:
        a.ensure_survey("s")
        assert a.insert_records("s", rows(10)) == 10
        assert b.insert_records("s", rows(5, start=8)) == 3  # 8, 9 stored through a
        assert b.respondents("s", [r.rid_hash for r in rows(2, start=12)]) == {
            rows(1, start=12)[0].rid_hash: {rows(1, start=12)[0].digest}}
        assert a.insert_records("s", rows(4, start=11)) == 2  # 11, 12 stored through b
        assert a.respondents("s", [rows(1, start=14)[0].rid_hash]) == {
            rows(1, start=14)[0].rid_hash: {rows(1, start=14)[0].digest}}
        assert a.count("s") == b.count("s") == 15
        assert a.load_records("s", 3).qi[:, 0].tolist() == [float(i) for i in range(15)]
    finally:
        a.close()
        b.close()


def test_a_new_sqlite_store_has_no_index_on_random_pseudonyms(tmp_path):
    """Its one index on the records is by survey and arrival (appended in order); the
    identities are kept by the store object (``Identities``)."""
    store = SQLiteStore(tmp_path / "store.db")
    try:
        indexes = store._q("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND "
                           "tbl_name = 'records'")
        assert [name for name, _ in indexes] == ["records_survey"]
        assert "(survey, seq)" in indexes[0][1]
    finally:
        store.close()


class _CommitFailsOnce:
    """A SQLite connection whose next COMMIT fails as a full disk does (SQLite rolls the
    transaction back), the rest passed through."""

    def __init__(self, conn):
        self._conn, self.failed = conn, False

    def execute(self, sql, *args):
        if sql == "COMMIT" and not self.failed:
            self.failed = True
            self._conn.execute("ROLLBACK")
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_records_of_a_failed_commit_are_stored_when_the_batch_comes_again(tmp_path):
    """A COMMIT that fails (a full disk) rolls the batch back: the identities kept in memory
    must not count its records as stored, or the worker's retry of the same batch would
    skip them all as redelivered and commit their offsets: the responses lost."""
    store = SQLiteStore(tmp_path / "store.db")
    try:
        store.ensure_survey("s")
        assert store.insert_records("s", rows(5)) == 5
        real = store._conn
        store._conn = failing = _CommitFailsOnce(real)
        with pytest.raises(StoreUnavailable):
            store.insert_records("s", rows(10, start=5))
        assert failing.failed
        store._conn = real
        assert store.count("s") == 5
        assert store.respondents("s", [rows(1, start=7)[0].rid_hash]) == {}
        assert store.insert_records("s", rows(10, start=5)) == 10
        assert store.load_records("s", 3).qi[:, 0].tolist() == [float(i) for i in range(15)]
    finally:
        store.close()


def test_the_ingest_worker_reads_the_identities_before_its_first_write_transaction(
        tmp_path, monkeypatch):
    """``load_identities`` (called by the ingest worker when it starts) reads every stored
    identity outside a write transaction, so the first insert does not hold SQLite's write
    lock while it reads a million rows."""
    from streamanon.service import ingest
    from tests.service.collector.test_collector_faults import make_config

    first = SQLiteStore(tmp_path / "store.db")  # make_config's store
    first.ensure_survey("s")
    first.insert_records("s", rows(50))
    first.close()
    monkeypatch.setattr(ingest, "_WORKER", {})
    monkeypatch.setattr(ingest, "worker_gc", lambda: None)  # the worker process's, not ours
    monkeypatch.setattr(sys, "setswitchinterval", lambda _: None)
    ingest._worker_start(make_config(tmp_path).model_dump_json(), b"k" * 32)
    store = ingest._WORKER["store"]
    try:
        assert not store._conn.in_transaction
        assert store._ids is not None and store._ids.seq == 50
        assert store._ids.digests("s", rows(1, start=49)[0].rid_hash) == {
            rows(1, start=49)[0].digest}
    finally:
        store.close()
