"""The end-to-end demo: embedded broker, a synthetic survey, the scheduled base run, the release.

``streamanon demo`` starts the embedded broker and the service in this process, opens a
survey for a compressed period (two minutes by default), produces the responses with uniform
arrivals (plus a few malformed ones, which go to the dead-letter topic), lets the planner start
the base run at the moment it computes, closes at the scheduled time, and publishes the
release. It then prints the predicted against the achieved time from close to release, and
times the one-shot run on the same records for comparison.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

SURVEY = "demo"


def _raw_config(bootstrap: str, out: Path, n: int, m: int, k: int, close: datetime,
                http: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"respondent_id": {"role": "identifier"}}
    for j in range(m):
        schema[f"q{j}"] = {"role": "quasi_identifier", "type": "float"}
    schema["answer"] = {"role": "confidential", "type": "int", "min": 1, "max": 5}
    return {
        "kafka": {"bootstrap_servers": bootstrap, "topic_prefix": f"demo{secrets.token_hex(3)}",
                  "partitions": 2},
        "store": {"url": f"sqlite:///{out / 'streamanon.db'}"},
        "output": {"directory": str(out)},
        "http": {"bind": http},
        "planner": {"interval_seconds": 1.0, "arrival_bin_seconds": 2.0, "arrival_bins": 10,
                    "cost_models": str(out / "cost_models.json")},
        "surveys": [{"id": SURVEY, "close": close.isoformat(), "k": k, "engine": "mdav",
                     "incremental": "nn_split_end", "expected_records": n,
                     "schema": schema}],
    }


def _responses(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, m)), rng.integers(1, 6, n)


def _produce(bootstrap: str, topic: str, X: np.ndarray, answers: np.ndarray, seconds: float,
             stop: threading.Event) -> None:
    """Uniform arrivals over ``seconds``, in small bursts; four malformed messages too."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10)
    n, m = X.shape
    started = time.monotonic()
    sent = 0
    bad = {n // 5: b"{broken", n // 3: b'["not", "an", "object"]',
           n // 2: json.dumps({"respondent_id": "x", "q0": "high"}).encode(),
           2 * n // 3: json.dumps({"respondent_id": "R0000001", **{f"q{j}": 0.0
                                   for j in range(m)}, "answer": 1}).encode()}
    while sent < n and not stop.is_set():
        due = min(n, int(n * (time.monotonic() - started) / seconds) + 1)
        for i in range(sent, due):
            body = {"respondent_id": f"R{i:07d}", **{f"q{j}": float(X[i, j]) for j in range(m)},
                    "answer": int(answers[i])}
            producer.send(topic, key=f"R{i:07d}".encode(), value=json.dumps(body).encode())
            if i in bad:
                producer.send(topic, value=bad[i])
        sent = due
        time.sleep(0.05)
    producer.flush()
    producer.close()


def _summary(report: dict[str, Any], one_shot_seconds: float, out: Path) -> str:
    predicted = report.get("predicted_seconds_after_close")
    lines = [
        "",
        f"release of survey '{SURVEY}' published: {report['n']:,} records, k = {report['k']}, "
        f"{report['m']} quasi-identifiers",
        f"  mode                        {report['mode']}"
        + (f" (mdav on {report['n_base']:,} + {report['incremental']} on "
           f"{report['n_increment']:,}, nu = {report['nu']:.4f})"
           if report["mode"] == "two-stage" else ""),
        f"  arrival coefficient s       {report['arrival_coefficient']:.1f}"
        if report.get("arrival_coefficient") else "  arrival coefficient s       -",
        f"  dead-lettered               {sum(report['rejected'].values())} "
        f"({', '.join(f'{k}: {v}' for k, v in sorted(report['rejected'].items())) or 'none'})",
        f"  predicted close -> release  {predicted:.2f} s (compute, from the plan)"
        if predicted is not None else "  predicted close -> release  -",
        f"  achieved: compute           {report['compute_seconds_after_close']:.2f} s after close",
        f"  achieved: close -> release  {report['close_to_release_seconds']:.2f} s (drain, "
        "compute, files, one message per record, manifest)",
        f"  one-shot run would take     {one_shot_seconds:.2f} s (measured now on the same "
        "records)",
        f"  distortion D = {report['distortion']:.4f}, IL = {report['information_loss']:.2f} %",
        f"  files in {out / SURVEY}: release.parquet, release.csv, report.json",
    ]
    return "\n".join(lines)


def run_demo(n: int = 50_000, m: int = 15, k: int = 10, out: str | Path = "demo-output",
             open_seconds: float = 120.0, seed: int = 7, http: str | None = None,
             linger: float = 0.0) -> dict[str, Any]:
    """Run the demo; return the release report.

    ``http`` (HOST:PORT, default a free loopback port) is where the dashboard, ``/api/status``
    and ``/metrics`` are served; ``linger`` keeps them up that many seconds after the release.
    """
    from scheduler.cost_model import CostModelStore, calibrate
    from streamanon.broker import EmbeddedBroker, free_port
    from streamanon.config import parse_config
    from streamanon.engines import run_engine
    from streamanon.engines.mdav import mdav
    from streamanon.metrics import standardise
    from streamanon.service import serve

    out = Path(out)
    if (out / "streamanon.db").exists() or (out / SURVEY).exists():
        print(f"removing the previous demo run in {out}")
        for name in ("streamanon.db", "streamanon.db-wal", "streamanon.db-shm"):
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / SURVEY, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    store = CostModelStore(out / "cost_models.json")
    if store.get("mdav", m, k) is None:
        print(f"calibrating the MDAV cost model at m = {m}, k = {k} (the first run on a machine "
              "also compiles the kernels, about 40 s) ...", flush=True)
        store.put("mdav", m, k, calibrate(mdav, m, k, budget_seconds=3.0))
    X, answers = _responses(n, m, seed)
    env = {"STREAMANON_HMAC_KEY": secrets.token_hex(32),
           "STREAMANON_HTTP_TOKEN": secrets.token_hex(32)}
    with EmbeddedBroker() as broker:
        print(f"embedded broker at {broker.bootstrap}", flush=True)
        placeholder = datetime.now(timezone.utc) + timedelta(days=1)  # set once ready
        bind = http or f"127.0.0.1:{free_port()}"
        config = parse_config(_raw_config(broker.bootstrap, out, n, m, k, placeholder, bind),
                              env, source="demo configuration")
        topic = config.topic(SURVEY, "responses")
        report: dict[str, Any] = {}

        async def main() -> None:
            stop = asyncio.Event()
            ready = asyncio.Event()
            holder: dict[str, Any] = {}

            def on_ready(service: Any) -> None:
                holder["service"] = service
                ready.set()

            server = asyncio.create_task(serve(config, stop=stop, on_ready=on_ready))
            await asyncio.wait([server, asyncio.ensure_future(ready.wait())],
                               return_when=asyncio.FIRST_COMPLETED)
            if server.done():
                await server  # raises what went wrong
            service = holder["service"]
            close = datetime.now(timezone.utc) + timedelta(seconds=open_seconds)
            service.set_close_time(SURVEY, close)
            print(f"dashboard at http://{bind}/ (also /api/status and /metrics)", flush=True)
            print(f"survey open for {open_seconds:.0f} s: producing {n:,} responses "
                  f"(m = {m}, k = {k}); close at {close:%H:%M:%S} UTC", flush=True)
            halt = threading.Event()
            # the last responses arrive just before the close, none after it
            producer = threading.Thread(target=_produce, args=(
                broker.bootstrap, topic, X, answers, 0.97 * open_seconds, halt), daemon=True)
            producer.start()
            try:
                while not service.surveys[SURVEY].closed_event.is_set():
                    await asyncio.sleep(5)
                    status = (await service.status())["surveys"][0]
                    plan = status["plan"] or {}
                    base_at = plan.get("base_at")
                    print(f"  {status['state']:<12} stored {status['stored']:>7,}   "
                          f"plan: nu = {plan.get('nu', float('nan')):.4f}, base snapshot at "
                          f"{base_at[11:19] if base_at else '-'}", flush=True)
                    if status["error"]:
                        raise RuntimeError(status["error"])
                release = await service._in_store(service.store.load_release, SURVEY)
                report.update(release.report)
                if linger > 0:
                    print(f"released; the dashboard stays at http://{bind}/ for {linger:.0f} s "
                          "(Ctrl-C to stop)", flush=True)
                    await asyncio.wait([server], timeout=linger)  # or until interrupted
            finally:
                halt.set()
                stop.set()
                await server

        asyncio.run(main())
    Z = standardise(X)
    run_engine("mdav", Z[: 10 * k], k)
    started = time.perf_counter()
    run_engine("mdav", Z, k)
    one_shot = time.perf_counter() - started
    report["one_shot_measured_seconds"] = one_shot
    print(_summary(report, one_shot, out))
    return report
