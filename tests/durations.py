"""The slowest tests of a ``make test`` run, started first and spread over the workers.

pytest-xdist's ``worksteal`` scheduler gives each of its ``W`` workers a contiguous segment
of the collected tests (sizes ``remaining // (W - i)``), which the worker runs from the front,
and lets an idle worker take tests from the end of another's segment. A test of minutes that
starts near the end of a segment keeps the whole run waiting while the other workers have
nothing left; :func:`spread` puts the known slow tests at the fronts of the segments instead,
the longest first, each on the segment with the least slow work so far.

``tests/durations.json`` holds their seconds, from one run's ``--durations=30`` table;
``python -m tests.durations RUN_OUTPUT`` writes it again from a run's output.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

FILE = Path(__file__).with_name("durations.json")
T = TypeVar("T")
#: Tests that measure a speed claim (the demo's release against its one-shot run): they go
#: last, at the end of the last worker's share, which the first worker to run out of its own
#: takes (worksteal takes from the ends): the start of a run, where the slow tests are all at
#: once, is the busiest time of the machine, and the end the quietest. Left where the
#: collection put them, near the start, the demo's base run once outlasted its head start
#: beside the other workers' heavy tests (its release 2.3x sooner than one-shot, not 3x).
MEASURING = frozenset({
    "tests/service/pipeline/test_demo_and_control.py::test_make_demo_runs_the_scheduled_pipeline"})


def known() -> dict[str, float]:
    """{test id: seconds} of tests/durations.json (empty when it is missing)."""
    if not FILE.exists():
        return {}
    return {k: float(v) for k, v in json.loads(FILE.read_text())["seconds"].items()
            if k not in MEASURING}


def segments(n: int, workers: int) -> list[int]:
    """The sizes of the segments worksteal hands ``workers`` idle workers out of ``n`` tests."""
    sizes, remaining = [], n
    for i in range(workers):
        sizes.append(remaining // (workers - i))
        remaining -= sizes[-1]
    return sizes


def spread(items: Sequence[T], ids: Sequence[str], seconds: dict[str, float],
           workers: int) -> list[T]:
    """``items`` (with test ids ``ids``) in the order that starts the slow ones first on
    every worker; the others keep their order."""
    slow = sorted((i for i, name in enumerate(ids) if name in seconds),
                  key=lambda i: -seconds[ids[i]])
    if not slow or workers < 1:
        return _measuring_last(list(items), ids, list(range(len(items))))
    heads: list[list[int]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for i in slow:
        j = min(range(workers), key=lambda w: (load[w], w))
        heads[j].append(i)
        load[j] += seconds[ids[i]]
    chosen = set(slow)
    rest = [i for i in range(len(items)) if i not in chosen]
    order, taken = [], 0
    for j, size in enumerate(segments(len(items), workers)):
        take = max(0, size - len(heads[j]))
        order += heads[j] + rest[taken:taken + take]
        taken += take
    order += rest[taken:]
    return _measuring_last([items[i] for i in order], ids, order)


def _measuring_last(ordered: list[T], ids: Sequence[str], order: list[int]) -> list[T]:
    """``ordered`` (``order`` of the original indices) with the :data:`MEASURING` tests
    moved to the end."""
    last = [pos for pos, i in enumerate(order) if ids[i] in MEASURING]
    keep = [pos for pos, i in enumerate(order) if ids[i] not in MEASURING]
    return [ordered[pos] for pos in keep + last]


def parse(output: str) -> dict[str, float]:
    """{test id: seconds, setup and call added} of a run's ``slowest ... durations`` table."""
    table = output.split("slowest", 1)[1] if "slowest" in output else ""
    out: dict[str, float] = {}
    for match in re.finditer(r"^([\d.]+)s (?:call|setup|teardown)\s+(\S+)$", table, re.M):
        out[match.group(2)] = round(out.get(match.group(2), 0.0) + float(match.group(1)), 1)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tests.durations RUN_OUTPUT (a make test log)", file=sys.stderr)
        return 2
    seconds = parse(Path(args[0]).read_text(errors="replace"))
    if not seconds:
        print(f"{args[0]}: no durations table found", file=sys.stderr)
        return 1
    about = json.loads(FILE.read_text())["_about"] if FILE.exists() else ""
    FILE.write_text(json.dumps({"_about": about, "seconds": seconds}, indent=1) + "\n")
    print(f"wrote {FILE}: {len(seconds)} tests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
