"""The privacy ledger (``Store.spend_privacy``) under concurrent spends from several store
objects on one database, as several service instances on one PostgreSQL store (or one SQLite
file) would spend: the total never exceeds the budget, and exactly floor(budget / epsilon)
spends succeed."""

from __future__ import annotations

import contextlib
import math
import threading
from pathlib import Path

import pytest

from streamanon.errors import BudgetSpentError
from streamanon.service.store import PostgresStore, SQLiteStore, Store

_SUM = "SELECT COALESCE(SUM(epsilon), 0), COUNT(*) FROM privacy_spent"




class _Rendezvous:
    """Makes a spend from one store wait, after it has read the sum spent, until a spend from
    the other store has read it too (or 0.3 s have passed): the widest window two instances
    can race in, every time rather than by luck."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=0.3)

    def after_read(self) -> None:
        # broken: the other one could not read (it waits for the lock): no race to widen
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait()


def _hooked(base: type[Store], rendezvous: _Rendezvous) -> type[Store]:
    class Hooked(base):  # type: ignore[misc, valid-type]
        def _q(self, sql, params=()):
            rows = super()._q(sql, params)
            if sql.startswith(_SUM):
                rendezvous.after_read()
            return rows

    return Hooked


def _open_two(backend: str, where: str, rendezvous: _Rendezvous | None) -> list[Store]:
    kind: type[Store] = PostgresStore if backend == "postgresql" else SQLiteStore
    if rendezvous is not None:
        kind = _hooked(kind, rendezvous)
    return [kind(where) for _ in range(2)]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database(request, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "store.db")
    return "postgresql", request.getfixturevalue("postgres_url")


def _spend_at_once(stores: list[Store], survey: str, epsilon: float, budget: float,
                   per_store: int) -> tuple[int, int]:
    """``per_store`` threads on each store spend ``epsilon`` at the same moment; returns how
    many spends succeeded and how many were refused."""
    start = threading.Barrier(per_store * len(stores))
    done: list[bool] = []
    failures: list[BaseException] = []

    def spend(store: Store, n: int) -> None:
        start.wait()
        try:
            store.spend_privacy(survey, f"r{id(store)}-{n}", epsilon, budget)
            done.append(True)
        except BudgetSpentError:
            done.append(False)
        except BaseException as exc:  # reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=spend, args=(store, n))
               for store in stores for n in range(per_store)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    return done.count(True), done.count(False)


@pytest.mark.parametrize(("epsilon", "budget"), [(0.3, 1.0), (0.1, 0.95)])
def test_two_instances_spending_at_once_never_exceed_the_budget(database, epsilon, budget):
    """Each spend of one store reads the sum while a spend of the other has read it and not
    yet written (the rendezvous): without a lock in the database both pay from the same sum."""
    backend, where = database
    stores = _open_two(backend, where, _Rendezvous())
    try:
        survey = f"race-{backend}-{epsilon:g}"
        succeeded, refused = _spend_at_once(stores, survey, epsilon, budget, per_store=10)
        allowed = math.floor(budget / epsilon + 1e-9)
        spent = stores[0].privacy_spent(survey)
        assert spent <= budget * (1 + 1e-9), f"{spent:g} spent of a budget of {budget:g}"
        assert (succeeded, refused) == (allowed, 20 - allowed)
        assert spent == pytest.approx(allowed * epsilon)
    finally:
        for store in stores:
            store.close()


def test_many_rounds_of_unhooked_spends_from_two_instances_never_exceed_the_budget(database):
    """The same without any help: 20 spends of 0.1 of a budget of 1.0 at once, from two
    store objects, survey after survey."""
    backend, where = database
    stores = _open_two(backend, where, None)
    try:
        for round_ in range(8):
            survey = f"rounds-{backend}-{round_}"
            succeeded, _ = _spend_at_once(stores, survey, 0.1, 1.0, per_store=10)
            assert stores[1].privacy_spent(survey) <= 1.0 + 1e-9
            assert succeeded == 10, f"round {round_}: {succeeded} spends of 0.1 succeeded"
    finally:
        for store in stores:
            store.close()
