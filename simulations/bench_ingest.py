"""Ingest benchmark: live ingest while a producer sends at a set rate, and backlog drain.

    python -m simulations.bench_ingest                          # 40,000/s for 60 s, 3 repeats
    python -m simulations.bench_ingest --rate 20000 --seconds 30 --n-backlog 100000 --repeat 1

Against the embedded broker (Tansu), the service as deployed (``Service``: collector, ingest
worker, SQLite store), responses of 17 fields (15 float quasi-identifiers, a respondent id as the
key, one int confidential answer), 4 partitions, each run on fresh topics, a survey of its own
and a fresh store. The load comes from a librdkafka producer (confluent-kafka, batches of up to
20 ms, idempotent) in a process of its own; on this machine it shares the cores with the
broker and the service.

1. Live: the service starts and is warmed up (5,000 records stored), then the producer sends
   ``--rate`` records/s for ``--seconds`` s. Each message's produce time is its Kafka timestamp
   (CreateTime, set by librdkafka when ``produce`` is called), read back from the delivery
   report with the message's partition and offset; the collector never stores it. A record
   counts as committed when its batch's store transaction has committed
   (``KafkaCollector.on_batch_stored``, which sees offsets only, never values). Reported: the
   producer's achieved rate; sustained throughput (records committed per second from 5 s into
   the window to its end: the producer's rate if the service keeps up, its capacity if not);
   all records over first produced to last committed; produce-to-commit latency p50 / p99 /
   max; how long after the producer's last message the service was done; and the cores each
   process kept busy over the window, the rest of the machine included (the part that
   saturates is the bottleneck; a busy machine shows as "everything else").
2. Backlog drain: ``--n-backlog`` records are produced before the service starts; the rate
   is from the first committed batch until every record is committed (the start-up, with the
   planner's cost-model calibration, the group join and the first fetch, is reported apart).
3. The ingest worker's stages, without broker or service: ``--n-stages`` records in batches
   of 20,000 through the worker's own functions, one after the other in one thread, into a
   fresh SQLite store: validation (``check_columns``: JSON, schema, HMAC pseudonym), the
   stored form (``prepare_records``: digest, bytes) and the store transaction
   (``store_prepared``: the de-duplication lookup and the batch insert), in microseconds of
   one core per record, for the first and the last fifth of the records (the store grows).
   Their sum is what one worker process needs per record; its inverse is one worker's
   ceiling.

Medians over ``--repeat`` runs. Targets (two cores, the broker and the producer on them too):
live >= 40,000 records/s sustained (judged by a run offering at least that); p99
produce-to-commit <= 1 s at 15,000 records/s offered (judged by a run at that rate whose
producer kept it); backlog drain >= 80,000 records/s.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import secrets
import statistics
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from simulations.bench_service import M, ensure, make_config, responses
from simulations.common import RESULTS, cpu_seconds, machine_busy_seconds
from streamanon.service.broker import EmbeddedBroker
from streamanon.service.lifecycle import Service

SURVEY = "ingest"  # each run's survey id starts so (a store given by URL holds them all)
PARTITIONS = 4  # make_config's
POOL = 20_000  # distinct quasi-identifier rows the producer cycles through
WARMUP = 5_000  # records stored before the live window opens
#: The targets: ingest sustained at TARGET_LIVE records/s offered; p99 produce-to-commit at
#: most TARGET_P99 seconds at TARGET_P99_RATE records/s offered; backlog drain.
TARGET_LIVE, TARGET_P99, TARGET_P99_RATE, TARGET_DRAIN = 40_000, 1.0, 15_000, 80_000
_ID = b'"respondent_id": "R'  # as bench_service.responses writes it, 8 digits follow


# -- the producer process ----------------------------------------------------------------------

def _templates() -> list[tuple[bytes, bytes]]:
    """The responses of :func:`bench_service.responses` cut around the respondent id's digits,
    so that a message is two joins, not a JSON encoding."""
    X = np.random.default_rng(2018).standard_normal((POOL, M))
    out = []
    for value in responses(X):
        head, tail = value.split(_ID)
        out.append((head + _ID, tail[8:]))
    return out


def _producer_main(bootstrap: str, conn: Connection) -> None:
    """Serve ``produce`` requests from the benchmark until told to stop (``None``)."""
    from confluent_kafka import Producer

    templates = _templates()
    # batches of up to 20 ms, as a platform sending this many responses would; idempotent:
    # each message once and in order, so the delivery reports name every one
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10_000, "batch.size": 512 * 1024,
                         "queue.buffering.max.messages": 1_000_000, "acks": "all",
                         "enable.idempotence": True})
    conn.send("ready")
    while (request := conn.recv()) is not None:
        conn.send(_produce(producer, templates, **request))
    producer.flush(30)


def _produce(producer: Any, templates: list[tuple[bytes, bytes]], *, topic: str, n: int,
             start: int, rate: float | None, record: str | None) -> dict[str, Any]:
    """Send ``n`` responses (respondents ``start``...) at ``rate`` per second (None: as fast as
    possible); with ``record``, save each message's partition, offset and produce time (ms)
    there (``.npz``) from the delivery reports."""
    partitions: list[int] = []
    offsets: list[int] = []
    stamps: list[int] = []
    errors = [0]

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1
        elif record is not None:
            partitions.append(msg.partition())
            offsets.append(msg.offset())
            stamps.append(msg.timestamp()[1])

    cpu0 = time.process_time()
    began = time.monotonic()
    sent = 0
    while sent < n:
        due = n if rate is None else min(n, int((time.monotonic() - began) * rate) + 1)
        if sent >= due:
            producer.poll(0.001)
            continue
        for g in range(sent, due):
            head, tail = templates[g % POOL]
            rid = b"%08d" % (start + g)
            while True:
                try:
                    producer.produce(topic, head + rid + tail, b"R" + rid, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let librdkafka send
                    producer.poll(0.005)
            if g % 1000 == 999:
                producer.poll(0)
        sent = due
        producer.poll(0)
    sent_seconds = time.monotonic() - began
    left = producer.flush(120)
    if record is not None:
        np.savez(record, partition=np.array(partitions, dtype=np.int32),
                 offset=np.array(offsets, dtype=np.int64),
                 produced_ms=np.array(stamps, dtype=np.int64))
    return {"n": n, "errors": errors[0] + left, "send_seconds": sent_seconds,
            "acked_seconds": time.monotonic() - began,
            "cpu_seconds": time.process_time() - cpu0}


class ProducerProcess:
    """The load generator, a spawned process with its own interpreter and librdkafka."""

    def __init__(self, bootstrap: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_producer_main, args=(bootstrap, child), daemon=True,
                                   name="bench-producer")
        self.process.start()
        if not self._conn.poll(120) or self._conn.recv() != "ready":
            raise RuntimeError("the producer process did not start")

    def request(self, **request: Any) -> None:
        self._conn.send(request)

    def result(self, timeout: float = 600.0) -> dict[str, Any]:
        if not self._conn.poll(timeout):
            raise TimeoutError("the producer did not finish")
        return self._conn.recv()

    def produce(self, **request: Any) -> dict[str, Any]:
        self.request(**request)
        return self.result()

    def close(self) -> None:
        self._conn.send(None)
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()


# -- measuring the service ---------------------------------------------------------------------

class CommitLog:
    """``KafkaCollector.on_batch_stored``: when each batch of the responses topic was
    committed to the store, as (time, partition, next offset) in :attr:`rows`, and how many
    records the survey (``ingest``, its ``SurveyIngest``) had stored by then in
    :attr:`totals`."""

    def __init__(self, topic: str, ingest: Any) -> None:
        self.topic = topic
        self.ingest = ingest
        self.rows: list[tuple[float, int, int]] = []
        self.totals: list[tuple[float, int]] = []

    def __call__(self, offsets: dict[Any, int]) -> None:
        now = time.time()
        self.rows.extend((now, tp.partition, o) for tp, o in offsets.items()
                         if tp.topic == self.topic)
        self.totals.append((now, self.ingest.stored))

    def commit_times(self, partition: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """When each (partition, offset) was committed; NaN if it never was."""
        out = np.full(len(offset), np.nan)
        rows = np.array(self.rows, dtype=np.float64).reshape(-1, 3)
        for p in np.unique(partition):
            mine = rows[rows[:, 1] == p]
            ends = np.maximum.accumulate(mine[:, 2])  # offsets are committed in order
            where = partition == p
            i = np.searchsorted(ends, offset[where], side="right")
            found = i < len(ends)
            times = np.full(len(i), np.nan)
            times[found] = mine[i[found], 0]
            out[where] = times
        return out




def processes(broker: EmbeddedBroker, producer: ProducerProcess, service: Service
              ) -> dict[str, list[int]]:
    """The pids of each part of the benchmark, by the name the report gives it."""
    assert broker.process is not None and service.collector is not None
    workers = getattr(service.collector, "workers", None) or [service.collector.worker.pool]
    return {"broker (Tansu)": [broker.process.pid], "producer": [producer.process.pid],
            "service main process": [os.getpid()],
            "ingest worker(s)": [pid for pool in workers for pid in pool._processes]}


def cpu_of(pids: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds used so far by each part, and by the rest of the machine (other
    processes: a benchmark on a busy machine says so)."""
    ours = {name: sum(map(cpu_seconds, group)) for name, group in pids.items()}
    return ours | {"everything else on the machine": machine_busy_seconds() - sum(ours.values())}


async def wait_stored(ingest: Any, n: int, timeout: float) -> bool:
    """Whether ``ingest`` (the survey's ``SurveyIngest``) stored ``n`` records in time."""
    deadline = time.monotonic() + timeout
    while ingest.stored < n:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


@dataclass
class Setup:
    """What the runs share: the broker, the producer, the store URL (None: a fresh SQLite
    file per run) and a folder for the cost models the service calibrates at its first
    start (so that later starts skip it)."""

    broker: EmbeddedBroker
    producer: ProducerProcess
    shared: Path
    store_url: str | None = None


def _config(setup: Setup, workdir: Path, n: int) -> Any:
    """The service's configuration for one run: one survey of its own, topics of its own."""
    config = make_config(setup.broker.bootstrap, workdir, [f"{SURVEY}_{secrets.token_hex(3)}"],
                         n)
    # a group of its own: the broker holds a join to a group whose last member just left
    # for up to 1.8 session timeouts
    config.kafka.group_id = f"bench-{secrets.token_hex(4)}"
    config.planner.cost_models = setup.shared / "cost_models.json"
    if setup.store_url:
        config.store.url = setup.store_url
    ensure(setup.broker.bootstrap, config)
    return config


async def watched_service(config: Any, sid: str, topic: str
                          ) -> tuple[Service, Any, CommitLog]:
    """The service started, the survey's ``SurveyIngest``, and the :class:`CommitLog` of its
    responses topic, hooked to the collector."""
    service = Service(config)
    await service.start()
    assert service.collector is not None
    ingest = service.surveys[sid].ingest
    commits = CommitLog(topic, ingest)
    service.collector.on_batch_stored = commits
    return service, ingest, commits


async def live_run(setup: Setup, rate: float, seconds: float) -> dict[str, Any]:
    """One live run: warm-up, then ``rate`` records/s for ``seconds`` s while the service
    ingests; see the module's docstring for what is measured."""
    n = int(rate * seconds)
    broker, producer = setup.broker, setup.producer
    with tempfile.TemporaryDirectory() as tmp:
        config = _config(setup, Path(tmp), n + WARMUP)
        sid = config.surveys[0].id
        topic = config.topic(sid, "responses")
        service, ingest, commits = await watched_service(config, sid, topic)
        try:
            producer.produce(topic=topic, n=WARMUP, start=0, rate=None, record=None)
            if not await wait_stored(ingest, WARMUP, 120):
                raise TimeoutError("the warm-up records were not stored within 120 s")
            pids = processes(broker, producer, service)
            cpu_before, wall_before = cpu_of(pids), time.monotonic()
            record = str(Path(tmp) / "produced.npz")
            producer.request(topic=topic, n=n, start=WARMUP, rate=rate, record=record)
            sent = await asyncio.get_running_loop().run_in_executor(
                None, producer.result, seconds * 4 + 300)
            cpu_window = {k: v - cpu_before[k] for k, v in cpu_of(pids).items()}
            wall = time.monotonic() - wall_before
            caught_up = await wait_stored(ingest, WARMUP + n, max(60.0, 3 * seconds))
            stored, rejected = ingest.stored - WARMUP, sum(ingest.rejected.values())
        finally:
            await service.stop()
        with np.load(record) as saved:
            produced = {name: saved[name] for name in saved.files}
    t_produced = produced["produced_ms"] / 1000.0
    t_committed = commits.commit_times(produced["partition"], produced["offset"])
    latency = t_committed - t_produced
    first, last = float(t_produced.min()), float(t_produced.max())
    window = max(last - first, 1e-9)
    done = np.isfinite(t_committed)
    # Sustained: records committed per second once the run is under way (the first quarter,
    # at most 5 s, is left out) until the producer's last message; a service that keeps up
    # shows the producer's rate, one that does not its capacity.
    settled = first + min(5.0, window / 4)
    in_window = int(np.sum(done & (t_committed > settled) & (t_committed <= last)))
    return {
        "rate_target": rate, "seconds_target": seconds, "n": n,
        "produced_per_second": n / window, "producer_errors": sent["errors"],
        "producer_kept_rate": n / window >= 0.98 * rate,
        "sustained_per_second": in_window / max(last - settled, 1e-9),
        "overall_per_second": (n / (float(np.nanmax(t_committed)) - first) if done.all()
                               else None),
        # a record never committed counts as infinitely late: None when it decides
        "latency_p50": _finite(np.percentile(np.where(done, latency, np.inf), 50)),
        "latency_p99": _finite(np.percentile(np.where(done, latency, np.inf), 99)),
        "latency_max": _finite(np.max(np.where(done, latency, np.inf))),
        "done_after_last_produced": (float(np.nanmax(t_committed)) - last if done.all()
                                     else None),
        # committed per second in each 10 s from the first message produced: how the rate
        # holds up as the store grows
        "per_10s": [int(np.sum(done & (t_committed > a) & (t_committed <= a + 10.0))) / 10.0
                    for a in np.arange(first, (float(np.nanmax(t_committed)) if done.any()
                                               else first) - 10.0, 10.0)],
        "committed": int(done.sum()), "stored": stored, "dead_lettered": rejected,
        "caught_up": caught_up, "cpu_seconds": cpu_window, "cpu_wall_seconds": wall,
        "batches": len(commits.totals),
    }


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


async def drain_run(setup: Setup, n: int) -> dict[str, Any]:
    """One backlog drain: ``n`` records produced, then the service started and timed until
    every one is committed to the store (from the first committed batch: a backlog that fits
    one batch has no rate, None)."""
    broker, producer = setup.broker, setup.producer
    with tempfile.TemporaryDirectory() as tmp:
        config = _config(setup, Path(tmp), n)
        sid = config.surveys[0].id
        topic = config.topic(sid, "responses")
        sent = producer.produce(topic=topic, n=n, start=0, rate=None, record=None)
        started = time.time()
        service, ingest, commits = await watched_service(config, sid, topic)
        try:
            pids = processes(broker, producer, service)
            cpu_before, wall_before = cpu_of(pids), time.monotonic()
            if not await wait_stored(ingest, n, 600):
                raise TimeoutError(f"{ingest.stored} of {n} stored within 600 s")
            if not commits.totals:  # all of it drained before the hook was set
                commits.totals.append((time.time(), n))
            cpu = {k: v - cpu_before[k] for k, v in cpu_of(pids).items()}
            wall = time.monotonic() - wall_before
        finally:
            await service.stop()
    # The hook is set once the service has started: batches committed before (a backlog
    # drained while the service was still starting) are missing from the log.
    (first_at, first_n), (done, last_n) = commits.totals[0], commits.totals[-1]
    first_batch = sum(o for t, _, o in commits.rows if t == first_at)  # offsets start at 0
    return {"n": n, "records_per_second": ((last_n - first_n) / (done - first_at)
                                           if done > first_at else None),
            "with_startup_per_second": n / (done - started),
            "startup_seconds": first_at - started if first_batch == first_n else None,
            "produce_per_second": n / sent["acked_seconds"], "cpu_seconds": cpu,
            "cpu_wall_seconds": wall, "batches": len(commits.totals)}


STAGE_BATCH = 20_000
# The worker as it is (the compiled schema, its garbage collection) and as it was, in one run
# (batches taken in turn, each variant into a store of its own): validation field by field
# (the per-field column checks) or compiled (msgspec), Python's default garbage collection or
# the worker's (ingest.worker_gc).
STAGE_VARIANTS = {"per-field, default gc": (False, False), "compiled, default gc": (True, False),
                  "compiled, worker gc": (True, True)}


def worker_stages(n: int) -> dict[str, Any]:
    """Microseconds of one core per record in each stage of the ingest worker (see the
    module's docstring, 3), for the first and the last fifth of ``n`` records, for each of
    :data:`STAGE_VARIANTS` (keyed by its name; "n" is ``n``)."""
    import gc

    from streamanon.service.ingest import WORKER_GC_THRESHOLD, prepare_records, store_prepared
    from streamanon.service.store import open_store
    from streamanon.service.validation import Validator, check_columns

    templates = _templates()
    default_gc = gc.get_threshold()
    out: dict[str, Any] = {"n": n}
    with tempfile.TemporaryDirectory() as tmp:
        config = make_config("127.0.0.1:9", Path(tmp), [SURVEY], n)
        survey = config.surveys[0]
        key = secrets.token_bytes(32)
        runs = []
        for j, (name, (compiled, tuned)) in enumerate(STAGE_VARIANTS.items()):
            validator = Validator(survey, key)
            if not compiled:
                validator._decode = None  # the per-field column checks
            store = open_store(f"sqlite:///{Path(tmp) / f'store{j}.db'}")
            store.ensure_survey(survey.id)
            # records in batch, three stage times
            runs.append((name, tuned, validator, store, []))
        try:
            for start in range(0, n, STAGE_BATCH):
                size = min(STAGE_BATCH, n - start)
                values = [templates[g % POOL][0] + b"%08d" % g + templates[g % POOL][1]
                          for g in range(start, start + size)]
                partitions, offsets = [0] * size, list(range(start, start + size))
                for _, tuned, validator, store, rows in runs:
                    gc.collect()
                    if tuned:
                        gc.freeze()
                        gc.set_threshold(*WORKER_GC_THRESHOLD)
                    t0 = time.process_time()
                    _, _, records = check_columns(partitions, offsets, values, [None] * size,
                                                  validator, None)
                    t1 = time.process_time()
                    _, prepared, _ = prepare_records(survey, records)
                    t2 = time.process_time()
                    with store.transaction():
                        store_prepared(survey, store, partitions, offsets, prepared)
                    rows.append((size, t1 - t0, t2 - t1, time.process_time() - t2))
                    del records, prepared
                    gc.unfreeze()
                    gc.set_threshold(*default_gc)
        finally:
            for run in runs:
                run[3].close()
    for name, _, _, _, rows in runs:
        fifth = max(1, len(rows) // 5)
        out[name] = {}
        for part_name, part in (("first", rows[:fifth]), ("last", rows[-fifth:])):
            count = sum(r[0] for r in part)
            times = out[name][part_name] = {
                stage: 1e6 * sum(r[i + 1] for r in part) / count
                for i, stage in enumerate(("validate", "prepare", "store"))}
            times["total"] = sum(times.values())
    return out


# -- report ------------------------------------------------------------------------------------

def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else None


def _num(value: float | None, spec: str = ",.0f") -> str:
    return "n/a" if value is None else format(value, spec)


def summarise(live: list[dict[str, Any]], drain: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the runs, and whether they meet the issue's targets."""
    out: dict[str, Any] = {}
    if live:
        s = out["live"] = {k: _median(live, k) for k in (
            "produced_per_second", "sustained_per_second", "overall_per_second",
            "latency_p50", "latency_p99", "latency_max", "done_after_last_produced")}
        s["producer_kept_rate"] = all(r["producer_kept_rate"] for r in live)
        rate = s["rate_target"] = live[0]["rate_target"]
        # None: the run offered another rate than the target's, so it does not measure it
        s["target_met"] = (None if rate < TARGET_LIVE
                           else bool((s["sustained_per_second"] or 0) >= TARGET_LIVE))
        s["latency_target_met"] = (None if rate != TARGET_P99_RATE or not s["producer_kept_rate"]
                                   else bool(s["latency_p99"] is not None
                                             and s["latency_p99"] <= TARGET_P99))
    if drain:
        s = out["drain"] = {k: _median(drain, k) for k in (
            "records_per_second", "with_startup_per_second", "startup_seconds")}
        s["target_met"] = bool((s["records_per_second"] or 0) >= TARGET_DRAIN)
    return out


def _cpu_rows(runs: list[dict[str, Any]]) -> list[str]:
    """Cores each part kept busy (CPU seconds per second of the window), median of runs."""
    return [f"| &nbsp;&nbsp;CPU: {name} | "
            f"{statistics.median(r['cpu_seconds'][name] / r['cpu_wall_seconds'] for r in runs):.2f}"
            " cores |" for name in runs[0]["cpu_seconds"]]


def report(args: argparse.Namespace, live: list[dict[str, Any]],
           drain: list[dict[str, Any]], summary: dict[str, Any],
           stages: dict[str, Any] | None = None) -> list[str]:
    """The markdown table and the targets, as printed."""
    lines = [f"streamanon ingest, embedded broker (Tansu), responses of 17 fields, "
             f"{PARTITIONS} partitions, {'a fresh SQLite' if not args.store_url else 'the given'}"
             f" store, {os.cpu_count()} cores shared by everything; median of {args.repeat}",
             "", "| measure | value |", "|---|---:|"]
    if live:
        s = summary["live"]
        lines += [
            f"| live: producer target | {args.rate:,.0f} records/s for {args.seconds:g} s |",
            f"| live: producer achieved | {_num(s['produced_per_second'])} records/s"
            f"{'' if s['producer_kept_rate'] else ' (below target)'} |",
            f"| live: sustained ingest, committed to the store | "
            f"{_num(s['sustained_per_second'])} records/s |",
            f"| live: all records, first produced to last committed | "
            f"{_num(s['overall_per_second'])} records/s |",
            f"| live: produce-to-commit latency p50 / p99 / max | "
            f"{_num(s['latency_p50'], '.2f')} / {_num(s['latency_p99'], '.2f')} / "
            f"{_num(s['latency_max'], '.2f')} s |",
            f"| live: done after the last message produced | "
            f"{_num(s['done_after_last_produced'], '.2f')} s |",
            f"| live: sustained ingest, each run | "
            f"{', '.join(_num(r['sustained_per_second']) for r in live)} records/s |",
            f"| live: committed per second, each 10 s (first run) | "
            f"{', '.join(_num(v) for v in live[0]['per_10s'])} |",
        ]
        lines += _cpu_rows(live)
    if drain:
        s = summary["drain"]
        lines += [
            f"| backlog drain of {args.n_backlog:,} records | "
            f"{_num(s['records_per_second'])} records/s |",
            f"| backlog drain, each run | "
            f"{', '.join(_num(r['records_per_second']) for r in drain)} records/s |",
            f"| backlog drain including start-up | {_num(s['with_startup_per_second'])} "
            f"records/s ({_num(s['startup_seconds'], '.1f')} s to the first committed batch) |",
        ]
        lines += _cpu_rows(drain)
    if stages:
        for variant in STAGE_VARIANTS:
            got = stages[variant]
            for name in ("validate", "prepare", "store", "total"):
                lines.append(f"| worker stage ({variant}), {name} (first / last fifth of "
                             f"{stages['n']:,}) | {got['first'][name]:.1f} / "
                             f"{got['last'][name]:.1f} us/record |")
            lines.append(f"| one worker's ceiling ({variant}; 1 / total, last fifth) | "
                         f"{1e6 / got['last']['total']:,.0f} records/s |")
    lines.append("")
    if live:
        lines += target_lines(summary["live"])
    if drain:
        lines.append(f"target backlog drain >= {TARGET_DRAIN:,}/s: "
                     f"{'met' if summary['drain']['target_met'] else 'MISSED'}")
    return lines


def target_lines(live: dict[str, Any]) -> list[str]:
    """The live targets, each met, MISSED, or not measured by a run at another rate."""
    def verdict(met: bool | None) -> str:
        return (f"not measured (offered {live['rate_target']:,.0f}/s)" if met is None
                else "met" if met else "MISSED")

    return [f"target live >= {TARGET_LIVE:,}/s sustained: {verdict(live['target_met'])}",
            f"target p99 produce-to-commit <= {TARGET_P99:g} s at {TARGET_P99_RATE:,}/s "
            f"offered: {verdict(live['latency_target_met'])}"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="simulations/bench_ingest.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=TARGET_LIVE,
                        help="records per second the producer sends in the live run "
                             f"(default {TARGET_LIVE:,}; 0 skips the live run)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="length of the live run in seconds (default 60)")
    parser.add_argument("--n-backlog", type=int, default=400_000,
                        help="records in the backlog-drain run (default 400,000; 0 skips it)")
    parser.add_argument("--n-stages", type=int, default=400_000,
                        help="records through the ingest worker's stages, timed one by one "
                             "without broker or service (default 400,000; 0 skips it)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each kind; the table shows medians (default 3)")
    parser.add_argument("--store-url", default=None,
                        help="store URL (postgresql://...) instead of a fresh SQLite file; "
                             "the runs share it, each with its own survey records")
    parser.add_argument("--out", default=str(RESULTS / "bench_ingest.json"),
                        help="where to write the JSON results "
                             "(default simulations/results/bench_ingest.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import json

    args = parse_args(argv)
    live: list[dict[str, Any]] = []
    drain: list[dict[str, Any]] = []
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as shared:
        setup = Setup(broker, ProducerProcess(broker.bootstrap), Path(shared), args.store_url)
        try:
            for _ in range(args.repeat):
                if args.rate > 0:
                    live.append(asyncio.run(live_run(setup, args.rate, args.seconds)))
                if args.n_backlog > 0:
                    drain.append(asyncio.run(drain_run(setup, args.n_backlog)))
        finally:
            setup.producer.close()
    stages = worker_stages(args.n_stages) if args.n_stages > 0 else None
    summary = summarise(live, drain)
    print("\n".join(report(args, live, drain, summary, stages)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"settings": vars(args) | {"cores": os.cpu_count()},
                               "live": live, "drain": drain, "stages": stages,
                               "summary": summary}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
