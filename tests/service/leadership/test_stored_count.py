"""The leader's count of a shared survey (``StoredCount``): only the records above a settled
``seq`` are counted each poll, and a record committed out of ``seq`` order within the settling
time is still counted."""

from __future__ import annotations

import pytest

from streamanon.service.leadership import StoredCount


class Table:
    """The committed ``seq``s of a survey, and ``count_after`` over them as PostgreSQL does."""

    def __init__(self) -> None:
        self.committed: set[int] = set()
        self.scanned = 0  # rows read by the queries, all polls together

    def count_after(self, after: int, bound: int) -> tuple[int, int, int]:
        rows = [s for s in self.committed if s > after]
        self.scanned += len(rows)
        return sum(s <= bound for s in rows), len(rows), max(rows, default=after)


def test_the_count_follows_inserts_and_reads_only_the_unsettled_rows():
    now = [0.0]
    table, counter = Table(), StoredCount(settle_seconds=30, clock=lambda: now[0])
    total = 0
    for second in range(300):
        now[0] = float(second)
        table.committed.update(range(total + 1, total + 101))  # 100 records a second
        total += 100
        assert counter.update(table.count_after) == total
    # each poll read the last 30 s or so of records, not the whole survey
    assert table.scanned < 300 * 32 * 100
    assert counter.settled_seq >= total - 32 * 100


def test_a_record_committed_out_of_seq_order_within_the_settling_time_is_counted():
    now = [0.0]
    table, counter = Table(), StoredCount(settle_seconds=30, clock=lambda: now[0])
    table.committed.update(range(1, 11))  # seq 11 is held by a transaction still open
    table.committed.update(range(12, 21))
    assert counter.update(table.count_after) == 19
    now[0] = 20.0
    table.committed.add(11)  # commits 20 s late: below the largest seq seen, not yet settled
    assert counter.update(table.count_after) == 20
    for t in (40.0, 80.0, 120.0):
        now[0] = t
        assert counter.update(table.count_after) == 20
    assert counter.settled == 20 and counter.settled_seq == 20


def test_a_failed_count_changes_nothing():
    now = [0.0]
    table, counter = Table(), StoredCount(settle_seconds=30, clock=lambda: now[0])
    table.committed.update(range(1, 11))
    assert counter.update(table.count_after) == 10
    now[0] = 40.0

    def broken(after: int, bound: int) -> tuple[int, int, int]:
        raise ConnectionError("the store went away")

    with pytest.raises(ConnectionError):
        counter.update(broken)
    assert (counter.settled, counter.settled_seq) == (0, 0)
    table.committed.update(range(11, 16))
    assert counter.update(table.count_after) == 15
    assert (counter.settled, counter.settled_seq) == (10, 10)  # the top seen at 0 s settled


def test_a_record_committed_after_its_seq_settled_is_counted_at_the_next_recount():
    """Left by issue 19: such a record was left out of the count for good. The count now starts
    again from the first record every ``recount_seconds``: one full count, then the settled
    point again."""
    now = [0.0]
    table = Table()
    counter = StoredCount(settle_seconds=30, recount_seconds=600, clock=lambda: now[0])
    table.committed.update(range(1, 11))
    table.committed.update(range(12, 21))
    for t in (0.0, 40.0, 80.0):
        now[0] = t
        assert counter.update(table.count_after) == 19
    assert counter.settled_seq == 20
    table.committed.add(11)  # 100 s late: its seq is settled, the polls above it miss it
    now[0] = 120.0
    assert counter.update(table.count_after) == 19
    now[0] = 600.0
    scanned = table.scanned
    assert counter.update(table.count_after) == 20  # the recount
    assert table.scanned - scanned == 20
    now[0] = 601.0
    scanned = table.scanned
    assert counter.update(table.count_after) == 20
    assert table.scanned - scanned == 0  # above the settled point again
