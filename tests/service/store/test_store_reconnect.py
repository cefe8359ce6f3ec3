"""The PostgreSQL store across server faults: sessions cut, the server stopped and started again.

Every call either works or raises StoreUnavailable (fixed text) within a bounded time; nothing
is half-written; once the server is back the same store object works again, without a restart.
"""

from __future__ import annotations

import threading
import time

import pytest

from simulations.postgres import controlled_postgres_server, why_unavailable
from streamanon.service.states import BASE_RUNNING, OPEN
from streamanon.service.store import StoreUnavailable, open_store
from tests.service.store.test_store import rows

_PG_REASON = why_unavailable()
HANG_GUARD = 30.0  # seconds: generous, only to catch a call that waits forever


@pytest.fixture(scope="module")
def pg_server():
    if _PG_REASON:  # `make test` installs Debian's postgresql; never skip these silently
        pytest.fail(f"PostgreSQL store tests cannot run: {_PG_REASON}")
    with controlled_postgres_server() as pg:
        yield pg


@pytest.fixture
def store(pg_server):
    if not pg_server.running():  # a failed test may have left it stopped
        pg_server.start()
    s = open_store(pg_server.url)
    for table in ("records", "surveys", "transitions", "checkpoints", "releases", "close_marks"):
        s._q(f"DELETE FROM {table}")
    s.ensure_survey("s")
    yield s
    if not pg_server.running():
        pg_server.start()
    s.close()


def unavailable_within_bound(call):
    """Run ``call``, which must raise StoreUnavailable (and nothing else) within the guard."""
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        call()
    elapsed = time.monotonic() - t0
    assert elapsed < HANG_GUARD, f"StoreUnavailable took {elapsed:.1f} s"
    return info.value, elapsed


def until_available(call):
    """Retry ``call`` while it raises StoreUnavailable; return its result and the wait."""
    t0 = time.monotonic()
    while True:
        try:
            return call(), time.monotonic() - t0
        except StoreUnavailable:
            assert time.monotonic() - t0 < HANG_GUARD, "the store did not come back"
            time.sleep(0.1)


def test_the_next_call_after_the_sessions_are_cut_works(store, pg_server):
    store.insert_records("s", rows(10))
    assert pg_server.terminate_backends() >= 1
    assert store.count("s") == 10  # a read
    assert pg_server.terminate_backends() >= 1
    assert store.insert_records("s", rows(10, start=10)) == 10  # a transaction
    assert pg_server.terminate_backends() >= 1
    assert store.transition("s", BASE_RUNNING).state == BASE_RUNNING
    assert store.count("s") == 20


def test_a_stopped_server_makes_calls_unavailable_until_it_is_back(store, pg_server):
    assert store.insert_records("s", rows(100)) == 100
    pg_server.stop()
    for call in (lambda: store.count("s"),  # a read, a transaction, a nested transaction
                 lambda: store.insert_records("s", rows(50, start=100)),
                 lambda: store.transition("s", BASE_RUNNING)):
        error, _ = unavailable_within_bound(call)
        text = str(error)
        assert "PostgreSQL" in text and "retry" in text
        for server_words in ("terminat", "administrator", "refused", "127.0.0.1", "closed"):
            assert server_words not in text  # fixed text, never the driver's or server's

    pg_server.start()
    count, _ = until_available(lambda: store.count("s"))
    assert count == 100  # the failed insert wrote nothing
    assert store.survey_state("s").state == OPEN  # nor the failed transition
    assert store.insert_records("s", rows(150)) == 50  # the ones from before are there once
    assert store.count("s") == 150
    assert len(set(store.load_records("s", 3).seq.tolist())) == 150


def test_a_transaction_cut_by_the_server_going_away_leaves_nothing(store, pg_server):
    def cut_transaction():
        with store._lock, store._transaction():
            store._q("UPDATE surveys SET error = 'half' WHERE id = 's'")
            store.insert_records("s", rows(5))  # nested: part of the same transaction
            pg_server.stop()
            store._q("UPDATE surveys SET error = 'done' WHERE id = 's'")

    unavailable_within_bound(cut_transaction)
    pg_server.start()
    until_available(lambda: store.count("s"))
    assert store.count("s") == 0
    assert store.survey_state("s").error is None


def test_a_large_insert_cut_midway_is_all_or_nothing(store, pg_server):
    batch = rows(100_000)
    outcome: list[object] = []

    def insert():
        try:
            outcome.append(store.insert_records("s", batch))
        except Exception as exc:
            outcome.append(exc)

    writer = threading.Thread(target=insert, daemon=True)
    writer.start()
    time.sleep(0.3)
    pg_server.terminate_backends()
    writer.join(HANG_GUARD)
    assert not writer.is_alive()
    assert outcome and (outcome[0] == len(batch) or isinstance(outcome[0], StoreUnavailable))
    n = until_available(lambda: store.count("s"))[0]
    assert n in (0, len(batch))
    assert n == (len(batch) if outcome[0] == len(batch) else 0)


def test_concurrent_writers_across_cut_sessions_lose_and_duplicate_nothing(store, pg_server):
    """Four writers retry a batch while the store is unavailable, as the collector does; the
    sessions are cut until several transactions were hit. Every acknowledged batch is stored,
    and nothing twice (a batch whose COMMIT was cut after the server took it is tried again)."""
    batch = 50
    acknowledged: list[range] = []
    failures: list[BaseException] = []
    retried: list[int] = []  # one entry per insert that raised StoreUnavailable
    stop = threading.Event()

    def writer(t: int) -> None:
        start = t * 10**6
        try:
            while not stop.is_set():
                deadline = time.monotonic() + HANG_GUARD
                while True:
                    try:
                        store.insert_records("s", rows(batch, start=start))
                        break
                    except StoreUnavailable:
                        retried.append(t)
                        assert time.monotonic() < deadline, "the store did not come back"
                        time.sleep(0.05)
                acknowledged.append(range(start, start + batch))
                start += batch
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(t,), daemon=True) for t in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + HANG_GUARD
    while len(retried) < 3 and time.monotonic() < deadline and not failures:
        time.sleep(0.1)
        pg_server.terminate_backends()
    time.sleep(0.2)
    stop.set()
    deadline = time.monotonic() + HANG_GUARD
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    assert len(retried) >= 3, "no cut hit a transaction"
    wanted = [i.to_bytes(32, "big") for r in acknowledged for i in r]
    assert set(store.respondents("s", wanted)) == set(wanted)
    assert store.count("s") == len(wanted)  # once each, nothing unacknowledged
