"""What a unique index on random pseudonyms costs a SQLite insert, as the table grows.

    python -m simulations.bench_store_index                      # 2,000,000 rows a variant
    python -m simulations.bench_store_index --rows 200000 --step 50000

The records table as the store makes it (WAL, ``synchronous=FULL``, the store's cache and
checkpoint settings, multi-row ``INSERT`` of 500 rows, a transaction per batch of 10,000 rows of
random 128-bit pseudonyms and digests) in three variants, each in a fresh file: the unique index
on (survey, pseudonym, digest) that the store had, with the pseudonym lookup the ingest worker
made before each batch; the same index without the lookup; and the store as it is now (no
unique index, an index by survey and seq; the identities are kept in memory by the store
object). Prints microseconds per row spent in the database (the rows are made outside the
timed part), per ``--step`` rows stored.
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np

from simulations.common import commit, machine
from streamanon.service.store.base import SCHEMA, UNIQUE_IDENTITY
from streamanon.service.store.sqlite import PRAGMAS

VARIANTS = {
    "unique index, with the lookup": (UNIQUE_IDENTITY, None, True),
    "unique index": (UNIQUE_IDENTITY, None, False),
    "now: index by survey and seq": ("", "CREATE INDEX s ON records (survey, seq)", False),
}
BATCH = 10_000
PER_INSERT = 500


def run(path: Path, unique: str, index: str | None, lookup: bool, rows: int,
        step: int) -> list[float]:
    """Microseconds per row in the database, one figure per ``step`` rows."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    for pragma in PRAGMAS:  # the store's own settings and tables
        conn.execute(f"PRAGMA {pragma}")
    conn.executescript(SCHEMA.format(autoinc="INTEGER PRIMARY KEY", blob="BLOB", unique=unique))
    if index:
        conn.execute(index)
    sql = ("INSERT OR IGNORE INTO records (survey, arrived_at, kafka_partition, kafka_offset, "
           "rid_hash, digest, qi, confidential, label) VALUES "
           + ", ".join(["('s', ?, ?, ?, ?, ?, ?, ?, ?)"] * PER_INSERT))
    rng = np.random.default_rng(1)
    qi = np.zeros(15).tobytes()
    figures, spent, done = [], 0.0, 0
    while done < rows:
        keys = rng.bytes(32 * BATCH)
        batch = [(1.0, 0, done + i, keys[32 * i:32 * i + 16], keys[32 * i + 16:32 * i + 32], qi,
                  '{"answer": 1}', None) for i in range(BATCH)]
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        if lookup:
            for s in range(0, BATCH, 2000):
                chunk = [r[3] for r in batch[s:s + 2000]]
                conn.execute("SELECT rid_hash, digest FROM records WHERE survey = 's' AND "
                             f"rid_hash IN ({', '.join('?' * len(chunk))})", chunk).fetchall()
        for s in range(0, BATCH, PER_INSERT):
            conn.execute(sql, [v for r in batch[s:s + PER_INSERT] for v in r])
        conn.execute("COMMIT")
        spent += time.perf_counter() - started
        done += BATCH
        if done % step == 0:
            figures.append(1e6 * spent / step)
            spent = 0.0
    conn.close()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000,
                        help="rows stored in each variant (default 2,000,000)")
    parser.add_argument("--step", type=int, default=400_000,
                        help="rows per printed figure, a multiple of 10,000 (default 400,000)")
    args = parser.parse_args(argv)
    if args.step % BATCH or args.step <= 0 or args.rows < args.step:
        parser.error(f"--step must be a positive multiple of {BATCH:,} and at most --rows")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, (unique, index, lookup)) in enumerate(VARIANTS.items()):
            results[name] = run(Path(tmp) / f"{i}.db", unique, index, lookup, args.rows,
                                args.step)
    marks = [args.step * (j + 1) for j in range(args.rows // args.step)]
    print(f"SQLite insert, us per row in the database; {started}, commit {commit()}, "
          f"{machine()}; command: python -m simulations.bench_store_index --rows {args.rows} "
          f"--step {args.step}\n")
    print("| rows stored | " + " | ".join(results) + " |")
    print("|---:|" + "---:|" * len(results))
    for j, mark in enumerate(marks):
        print(f"| {mark:,} | " + " | ".join(f"{v[j]:.1f}" for v in results.values()) + " |")


if __name__ == "__main__":
    main()
