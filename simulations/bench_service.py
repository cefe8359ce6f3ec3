"""Service benchmark: sustained ingest, and close-to-release against the one-shot run.

    python simulations/bench_service.py                  # 200,000 records, about 5 minutes
    python simulations/bench_service.py --n 20000 --repeat 1

Against the embedded broker, in one process: responses of 17 fields (15 quasi-identifiers, a
respondent id, one confidential answer), 4 partitions.

1. Ingest: ``--n`` responses are produced first; then the service starts. Sustained rate: from
   the first committed batch until every record is in the store and its offsets are committed;
   the rate including the consumer's start-up (group join, first fetch) is reported too.
   Median of ``--repeat`` runs, each on fresh topics and a fresh store.
2. Close-to-release at n x 15, k = 10: (a) two-stage: the base run starts on the first 95 %,
   the last 5 % arrive after it, then the survey closes; (b) one-shot: the same records, closed
   without a base run. Both are timed from the close request to the last release message
   acknowledged, and split into compute and the rest (drain, files, publishing). The one-shot
   MDAV on the same records is timed on its own for reference.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from simulations.common import RESULTS
from streamanon.service.broker import EmbeddedBroker
from streamanon.service.config import parse_config
from streamanon.service.lifecycle import Service

M = 15


def make_config(bootstrap: str, workdir: Path, surveys: list[str], n: int) -> Any:
    schema: dict[str, Any] = {"respondent_id": {"role": "identifier"}}
    schema.update({f"q{j}": {"role": "quasi_identifier", "type": "float"} for j in range(M)})
    schema["answer"] = {"role": "confidential", "type": "int"}
    raw = {
        "kafka": {"bootstrap_servers": bootstrap, "topic_prefix": f"b{secrets.token_hex(3)}",
                  "partitions": 4},
        "store": {"url": f"sqlite:///{workdir / 'store.db'}"},
        "output": {"directory": str(workdir / "out")},
        "http": {"bind": "127.0.0.1:0"},
        "planner": {"interval_seconds": 3600, "cost_models": str(workdir / "models.json")},
        "surveys": [{"id": sid, "k": 10, "close": "on-command", "expected_records": n,
                     "schema": schema} for sid in surveys],
    }
    env = {"STREAMANON_HMAC_KEY": secrets.token_hex(32),
           "STREAMANON_HTTP_TOKEN": secrets.token_hex(32)}
    return parse_config(raw, env)


def responses(X: np.ndarray, start: int = 0) -> list[bytes]:
    names = [f"q{j}" for j in range(M)]
    out = []
    for i, row in enumerate(X.tolist()):
        body = dict(zip(names, row, strict=True))
        body["respondent_id"] = f"R{start + i:08d}"
        body["answer"] = (start + i) % 5
        out.append(json.dumps(body).encode())
    return out


def produce(bootstrap: str, topic: str, values: list[bytes]) -> float:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=512 * 1024)
    started = time.perf_counter()
    for v in values:
        producer.send(topic, value=v)
    producer.flush()
    producer.close()
    return len(values) / (time.perf_counter() - started)


def ensure(bootstrap: str, config: Any) -> None:
    from streamanon.service.broker import ensure_topics

    ensure_topics(bootstrap, [config.topic(s.id, "responses") for s in config.surveys], 4)


async def wait_stored(service: Service, sid: str, n: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while service.surveys[sid].ingest.stored < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sid}: {service.surveys[sid].ingest.stored} of {n} stored")
        await asyncio.sleep(0.02)


async def ingest_run(bootstrap: str, X: np.ndarray) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(bootstrap, Path(tmp), ["ingest"], len(X))
        ensure(bootstrap, config)
        produce_rate = produce(bootstrap, config.topic("ingest", "responses"), responses(X))
        service = Service(config)
        await service.start()
        started = time.perf_counter()
        await wait_stored(service, "ingest", 1)
        first, first_at = service.surveys["ingest"].ingest.stored, time.perf_counter()
        await wait_stored(service, "ingest", len(X))
        done = time.perf_counter()
        await service.stop()
    return {"records_per_second": (len(X) - first) / (done - first_at),
            "with_startup_per_second": len(X) / (done - started),
            "startup_seconds": first_at - started, "seconds": done - started,
            "produce_per_second": produce_rate}


async def release_run(bootstrap: str, X: np.ndarray) -> dict[str, Any]:
    n = len(X)
    n_base = int(0.95 * n)
    with tempfile.TemporaryDirectory() as tmp:
        config = make_config(bootstrap, Path(tmp), ["twostage", "oneshot"], n)
        ensure(bootstrap, config)
        values = responses(X)
        produce(bootstrap, config.topic("twostage", "responses"), values[:n_base])
        produce(bootstrap, config.topic("oneshot", "responses"), values)
        service = Service(config)
        await service.start()
        await wait_stored(service, "twostage", n_base)
        assert await service.start_base("twostage", None)
        while (await service.survey_state("twostage")).state != "BASE_DONE":
            await asyncio.sleep(0.05)
        produce(bootstrap, config.topic("twostage", "responses"), values[n_base:])
        await wait_stored(service, "twostage", n)
        await wait_stored(service, "oneshot", n)
        out = {}
        for sid in ("twostage", "oneshot"):
            await service.close(sid)
            await service.closed(sid, timeout=900)
            report = (await service.load_release(sid)).report
            out[sid] = report
        await service.stop()
    return out


def one_shot_compute(X: np.ndarray, repeat: int) -> float:
    from streamanon.engines import run_engine
    from streamanon.metrics import standardise

    Z = standardise(X)
    run_engine("mdav", Z[:200], 10)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run_engine("mdav", Z, 10)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(RESULTS / "bench_service.json"))
    args = parser.parse_args()
    X = np.random.default_rng(2018).standard_normal((args.n, M))
    with EmbeddedBroker() as broker:
        runs = [asyncio.run(ingest_run(broker.bootstrap, X)) for _ in range(args.repeat)]
        release = asyncio.run(release_run(broker.bootstrap, X))
    one_shot = one_shot_compute(X, args.repeat)

    rates = [r["records_per_second"] for r in runs]
    print(f"\nstreamanon service, embedded broker (Tansu), {args.n:,} responses of 17 fields, "
          f"4 partitions, SQLite store\n")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| sustained ingest, topic to committed store (median of {len(runs)}) | "
          f"{statistics.median(rates):,.0f} records/s |")
    print(f"| sustained ingest, each run | {', '.join(f'{r:,.0f}' for r in rates)} records/s |")
    startup = [r["with_startup_per_second"] for r in runs]
    print(f"| ingest including consumer start-up (median) | {statistics.median(startup):,.0f} "
          f"records/s ({statistics.median(r['startup_seconds'] for r in runs):.1f} s to the "
          "first committed batch) |")
    print(f"| producing the test load (kafka-python, for reference) | "
          f"{statistics.median(r['produce_per_second'] for r in runs):,.0f} records/s |")
    for sid, label in (("twostage", "two-stage (base on 95 %, nn_split_end on 5 %)"),
                       ("oneshot", "one-shot at close")):
        r = release[sid]
        print(f"| close to release, {label} | {r['close_to_release_seconds']:.2f} s |")
        print(f"| &nbsp;&nbsp;of which compute after close | "
              f"{r['compute_seconds_after_close']:.2f} s |")
        print(f"| &nbsp;&nbsp;D | {r['distortion']:.4f} |")
    print(f"| one-shot MDAV on the same {args.n:,} x 15 records, k = 10 (median) | "
          f"{one_shot:.2f} s |")
    target = statistics.median(rates) >= 20_000
    print(f"\ntarget: ingest >= 20,000 records/s: {'met' if target else 'MISSED'}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"ingest": runs, "release": release,
                                          "one_shot_seconds": one_shot}, indent=2,
                                         default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
