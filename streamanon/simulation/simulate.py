"""Simulation mode: replay an arrival profile through the real pipeline on a compressed clock.

``streamanon simulate`` (and :func:`run_simulation`) starts the embedded broker and the service
in this process, produces ``n`` synthetic responses at the moments an arrival profile gives
(``scheduler.profiles``), lets the live planner start the base run when it decides, closes at
the end of the survey, and publishes the release, exactly as in production. Only survey time is
compressed: every moment of the survey (arrivals, the close, the deadline) is divided by
``speedup``, so the planner sees the compressed arrivals; the compute (base run, incremental
stage, publishing) takes the real time it takes. A 10 h survey at speedup 600 lasts one minute.

The report (``report.md`` with PNG plots, and ``simulation.json``) has the arrival curve with the
base snapshot, close and release moments; predicted against achieved close-to-release time;
the one-shot time (measured on the same records after the release; the last response is due
up to a second before the close, so all ``n`` are released: :func:`send_times`); nu and the arrival
coefficient; and D of the release against the one-shot release (delta = D / D_one_shot - 1).
``--dry-run`` runs only the planner on the profile's expected arrival curve and the calibrated
cost model, without producing anything. Both plans, the predicted one and the live one, are
:func:`scheduler.live.plan`.

Nothing here prints: progress messages go to a ``progress`` callback (default: this module's
logger), which the CLI sets to print them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from scheduler import live
from scheduler.arrivals import CumulativeForecast
from scheduler.choice import Option, PlanRequest, plan_survey
from scheduler.profiles import resolve
from scheduler.quality import DEFAULT_MAX_DELTA, delta_against_one_shot
from streamanon.engines import run_engine
from streamanon.io import atomic_write, write_json
from streamanon.metrics import distortion, standardise
from streamanon.service.broker import EmbeddedBroker, free_port, wait_for_kafka
from streamanon.service.config import parse_config
from streamanon.service.engine_traits import auto_engine_names, stage_traits
from streamanon.service.lifecycle import serve
from streamanon.service.planning import plan_request
from streamanon.service.web import snapshot_html
from streamanon.simulation.calibration import calibrated_model, candidates
from streamanon.simulation.respondents import PRODUCER_LINGER_MS, start_respondents

SURVEY = "sim"
DATA_KINDS = ("gaussian", "census-like")
PRODUCER_MARGIN_SECONDS = 1.0  # the last response is due this long before the close, at most

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
"""Receives one progress message at a time (the CLI prints them)."""


@dataclass
class SurveyData:
    """The responses of a simulated survey: quasi-identifiers and one confidential answer."""

    X: np.ndarray
    answers: np.ndarray
    description: str


def make_data(kind: str, n: int, m: int, seed: int = 7) -> SurveyData:
    """``gaussian`` (i.i.d. standard normal n x m), ``census-like`` (seeded multivariate normal
    with the means and covariance of the CASC Census benchmark, 13 columns, shipped in
    ``streamanon/data/census_moments.json``), or a CSV file whose numeric columns are the
    quasi-identifiers (its first ``n`` rows; ``m`` is ignored)."""
    rng = np.random.default_rng(seed)
    answers = rng.integers(1, 6, n)
    if kind == "gaussian":
        return SurveyData(rng.standard_normal((n, m)), answers,
                          f"i.i.d. Gaussian {n:,} x {m}, seed {seed}")
    if kind == "census-like":
        moments = json.loads(resources.files("streamanon").joinpath(
            "data/census_moments.json").read_text())
        X = rng.multivariate_normal(moments["mean"], moments["cov"], n)
        return SurveyData(X, answers, f"census-like {n:,} x 13 (multivariate normal with the "
                          f"CASC Census means and covariance), seed {seed}")
    path = Path(kind)
    if not path.is_file():
        raise ValueError(f"--data must be gaussian, census-like or a CSV file; {kind!r} is none")
    import pandas as pd

    frame = pd.read_csv(path).select_dtypes("number").dropna()
    if frame.shape[1] == 0 or len(frame) < 1:
        raise ValueError(f"{path}: no complete numeric columns to use as quasi-identifiers")
    X = frame.to_numpy(dtype=np.float64)[:n]
    return SurveyData(X, answers[: len(X)], f"{path.name}: {len(X):,} x {X.shape[1]} "
                      f"(numeric columns {', '.join(map(str, frame.columns))})")


@contextlib.contextmanager
def kafka_at(bootstrap: str | None, progress: Progress = log.info) -> Iterator[str]:
    """The brokers a run uses: those at ``bootstrap`` when given (Apache Kafka, say: waited for,
    left running at the end), else an embedded broker of the run's own (started and stopped
    here). Each run's topics and consumer group carry a fresh prefix, so runs on one broker
    never read each other's messages."""
    if bootstrap:
        wait_for_kafka(bootstrap, 60.0)
        progress(f"Kafka at {bootstrap}")
        yield bootstrap
        return
    with EmbeddedBroker() as broker:
        progress(f"embedded broker at {broker.bootstrap}")
        yield broker.bootstrap


def service_config(bootstrap: str, out: Path, *, n: int, m: int, k: int, close: datetime,
                   http: str, engine: str = "mdav", incremental: str = "auto",
                   deadline: float | None = None, survey: str = SURVEY,
                   arrival_bin_seconds: float = 2.0,
                   refine: str | float = "off", objective: str = "balanced",
                   max_delta: float = DEFAULT_MAX_DELTA,
                   min_nu: float = 0.0) -> dict[str, Any]:
    """The raw service configuration of a synthetic survey ``q0..q{m-1}`` plus ``answer``."""
    schema: dict[str, Any] = {"respondent_id": {"role": "identifier"}}
    for j in range(m):
        schema[f"q{j}"] = {"role": "quasi_identifier", "type": "float"}
    schema["answer"] = {"role": "confidential", "type": "int", "min": 1, "max": 5}
    spec: dict[str, Any] = {"id": survey, "close": close.isoformat(), "k": k, "engine": engine,
                            "incremental": incremental, "expected_records": n,
                            "refine": refine, "objective": objective, "max_delta": max_delta,
                            "min_nu": min_nu, "schema": schema}
    if deadline is not None:
        spec["deadline"] = f"{deadline}s"
    prefix = f"{survey}{secrets.token_hex(3)}"
    return {
        "kafka": {"bootstrap_servers": bootstrap, "topic_prefix": prefix,
                  "group_id": f"{prefix}-collector", "partitions": 2},
        "store": {"url": f"sqlite:///{out / 'streamanon.db'}"},
        "output": {"directory": str(out / "releases"), "reports_directory": str(out / "reports")},
        "http": {"bind": http},
        "planner": {"interval_seconds": 1.0, "arrival_bin_seconds": arrival_bin_seconds,
                    "arrival_bins": 10, "cost_models": str(out / "cost_models.json")},
        "surveys": [spec],
    }


def fresh_output(out: Path, survey: str, progress: Progress = log.info) -> None:
    """Remove the store and release of a previous run in ``out`` (not the cost models)."""
    folders = [out / "releases" / survey, out / "reports" / survey]
    if (out / "streamanon.db").exists() or any(f.exists() for f in folders):
        progress(f"removing the previous run in {out}")
        for name in ("streamanon.db", "streamanon.db-wal", "streamanon.db-shm"):
            (out / name).unlink(missing_ok=True)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)


def run_pipeline(data: SurveyData, send_at: np.ndarray, *, out: Path, k: int, open_seconds: float,
                 engine: str = "mdav", incremental: str = "auto",
                 deadline: float | None = None, http: str | None = None, linger: float = 0.0,
                 survey: str = SURVEY, log_every: float = 5.0,
                 dashboard: dict[str, Any] | None = None,
                 progress: Progress = log.info, refine: str | float = "off",
                 objective: str = "balanced",
                 max_delta: float = DEFAULT_MAX_DELTA, min_nu: float = 0.0,
                 bootstrap: str | None = None) -> dict[str, Any]:
    """Broker, service and producer: the survey is open ``open_seconds`` (wall clock), response
    ``i`` is sent at ``send_at[i]``; returns the release report with ``opened_at``. The broker
    is the embedded one, or the Kafka at ``bootstrap`` (:func:`kafka_at`).

    ``dashboard``, when given, receives the service's final ``/api/status`` (counts and times
    only) under ``"status"``, for :func:`streamanon.service.web.snapshot_html`."""

    n, m = data.X.shape
    env = {"STREAMANON_HMAC_KEY": secrets.token_hex(32),
           "STREAMANON_HTTP_TOKEN": secrets.token_hex(32)}
    report: dict[str, Any] = {}
    dashboard = {} if dashboard is None else dashboard
    with kafka_at(bootstrap, progress) as brokers:
        placeholder = datetime.now(timezone.utc) + timedelta(days=1)  # set once ready
        bind = http or f"127.0.0.1:{free_port()}"
        raw = service_config(brokers, out, n=n, m=m, k=k, close=placeholder,
                             http=bind, engine=engine, incremental=incremental,
                             deadline=deadline, survey=survey,
                             arrival_bin_seconds=max(0.5, min(10.0, open_seconds / 60)),
                             refine=refine, objective=objective, max_delta=max_delta,
                             min_nu=min_nu)
        config = parse_config(raw, env, source="simulation configuration")
        topic = config.topic(survey, "responses")

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
            opened = time.time()
            close = datetime.fromtimestamp(opened + open_seconds, timezone.utc)
            service.set_close_time(survey, close)
            progress(f"dashboard at http://{bind}/ (also /api/status and /metrics)")
            progress(f"survey open for {open_seconds:.0f} s: producing {n:,} responses "
                     f"(m = {m}, k = {k}); close at {close:%H:%M:%S} UTC")
            halt, producer = start_respondents(brokers, topic, data.X,
                                               data.answers, send_at, time.monotonic())
            try:
                while not service.surveys[survey].closed_event.is_set():
                    await asyncio.sleep(log_every)
                    status = (await service.status()).surveys[0]
                    base_at, nu = status.base_at, status.nu
                    progress(f"  {status.state:<12} stored {status.stored:>8,}   plan: "
                             f"nu = {'-' if nu is None else f'{nu:.4f}'}, base snapshot at "
                             f"{'-' if base_at is None else f'{base_at - opened:+.1f} s'}")
                    if status.error:
                        raise RuntimeError(status.error)
                release = await service.load_release(survey)
                report.update(release.report)
                report["opened_at"] = opened
                dashboard["status"] = (await service.status()).to_json()
                if linger > 0:
                    progress(f"released; the dashboard stays at http://{bind}/ for "
                             f"{linger:.0f} s (Ctrl-C to stop)")
                    await asyncio.wait([server], timeout=linger)  # or until interrupted
            finally:
                halt.set()
                stop.set()
                await server
                await asyncio.to_thread(producer.join, 130)

        asyncio.run(main())
    return report


def _send_fast(bootstrap: str, topic: str, data: SurveyData) -> None:
    """Every response of ``data`` at once, by librdkafka (the load is not what is timed)."""
    from streamanon.service.kafka_clients import KafkaSettings, rdkafka_producer

    m = data.X.shape[1]
    producer = rdkafka_producer(KafkaSettings(bootstrap), {
        "linger.ms": 50, "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000})
    names = [f"q{j}" for j in range(m)]
    for i, row in enumerate(data.X.tolist()):
        body = {"respondent_id": f"R{i:07d}", **dict(zip(names, row, strict=True)),
                "answer": int(data.answers[i])}
        producer.produce(topic, key=f"R{i:07d}".encode(), value=json.dumps(body).encode())
        if i % 100_000 == 99_999:
            producer.poll(0)
    if producer.flush(600):
        raise RuntimeError(f"the one-shot reference's responses did not reach {topic}")


def one_shot_release(data: SurveyData, *, out: Path, k: int, engine: str,
                     progress: Progress = log.info,
                     bootstrap: str | None = None) -> dict[str, Any]:
    """The one-shot release of the same records through the same service, for comparison:
    a survey that closes on command (so no base run), every response stored first, then
    closed; returns its ``report.json`` (close to release, its steps, D).

    The records go to a fresh store in ``out/one-shot`` on a broker of their own (or on new
    topics of the Kafka at ``bootstrap``), after the
    survey under test has released, so the two never share the cores. What its service
    recorded is kept in ``out/cost_models.json`` too, when that file exists (a release of this
    machine's, which the next plans made with that file weigh: its close steps,
    ``CostModelStore.observe_release``, and its engine run on every record, a sample of the
    engine's cost)."""
    n, m = data.X.shape
    workdir = out / "one-shot"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    if (out / "cost_models.json").exists():  # the same models, calibrated once
        shutil.copy(out / "cost_models.json", workdir / "cost_models.json")
    env = {"STREAMANON_HMAC_KEY": secrets.token_hex(32),
           "STREAMANON_HTTP_TOKEN": secrets.token_hex(32)}
    with kafka_at(bootstrap, progress) as brokers:
        raw = service_config(brokers, workdir, n=n, m=m, k=k,
                             close=datetime.now(timezone.utc), http=f"127.0.0.1:{free_port()}",
                             engine=engine, survey="oneshot")
        raw["surveys"][0]["close"] = "on-command"
        config = parse_config(raw, env, source="one-shot reference configuration")

        async def main() -> dict[str, Any]:
            from streamanon.service.broker import ensure_topics
            from streamanon.service.lifecycle import Service

            ensure_topics(brokers, [config.topic("oneshot", "responses")], 2)
            service = Service(config)
            await service.start()
            try:
                progress(f"one-shot reference: storing the same {n:,} responses, then closing "
                         f"and releasing them with {engine} at close ...")
                await asyncio.to_thread(_send_fast, brokers,
                                        config.topic("oneshot", "responses"), data)
                while service.surveys["oneshot"].ingest.stored < n:
                    await asyncio.sleep(0.05)
                await service.close("oneshot")
                await service.closed("oneshot", timeout=7200)
                return dict((await service.load_release("oneshot")).report)
            finally:
                await service.stop()

        report = asyncio.run(main())
    if (out / "cost_models.json").exists():  # what the release left for the next plans:
        # its close steps (compute_rest with them) and its engine run on every record
        shutil.copy(workdir / "cost_models.json", out / "cost_models.json")
    return report


def one_shot(X: np.ndarray, k: int, engine: str) -> tuple[float, float]:
    """Seconds and distortion of the one-shot release of all records (after a warm-up)."""

    Z = standardise(X)
    run_engine(engine, Z[: min(len(Z), 10 * k)], k)
    started = time.perf_counter()
    labels = run_engine(engine, Z, k)
    return time.perf_counter() - started, distortion(Z, labels)


# -- the simulate command ----------------------------------------------------------------------


def simulated_request(*, k: int, engine: str = "mdav", incremental: str = "auto",
                      deadline: float | None = None, refine: str | float = "off",
                      objective: str = "balanced", max_delta: float = DEFAULT_MAX_DELTA,
                      min_nu: float = 0.0) -> PlanRequest:
    """What the simulated survey with these settings asks of the planner: the request the
    service builds from its configuration (:func:`service_config`, then
    :func:`streamanon.service.planning.plan_request`), so the prediction plans what the
    service will."""
    raw = service_config("127.0.0.1:9092", Path("simulation"), n=3 * k, m=1, k=k,
                         close=datetime.now(timezone.utc), http="127.0.0.1:0", engine=engine,
                         incremental=incremental, deadline=deadline, refine=refine,
                         objective=objective, max_delta=max_delta, min_nu=min_nu)
    return plan_request(parse_config(raw, {}, require_secrets=False).surveys[0])


def predict(profile: Any, n: int, duration: float, request: PlanRequest,
            options: list[Option], *, slowdown: float = 1.0) -> dict[str, Any]:
    """The service's plan (:func:`scheduler.choice.plan_survey` of the survey's ``request``,
    its deadline after close) on the profile's expected arrival curve (compressed seconds):
    what the planner would choose if the forecast were exact. ``options`` are the candidates
    with their cost models (:func:`streamanon.simulation.calibration.candidates`: the engines
    and stages the request leaves to the planner, or its one engine); ``slowdown`` the
    machine's expected slow-down of the base run (:func:`scheduler.live.load_slowdown`)."""

    grid = np.linspace(0.0, 1.0, 2001)
    forecast = CumulativeForecast.piecewise(grid * duration - duration,  # close at t = 0
                                            profile.cumulative(grid) * n)
    plan, choice = plan_survey(request, forecast, options, seconds_to_close=duration,
                               slowdown=slowdown)
    same_engine = plan.engine or request.engine
    stage = plan.stage or request.stage
    option = next(o for o in options if o.engine.name == same_engine)
    model = option.base_cost
    others = {o.engine.name: o.base_cost for o in options if o.engine.name != same_engine}
    warning = live.window_warning(same_engine, model, plan, duration, others)
    return {"nu": plan.nu, "engine": plan.engine, "stage": plan.stage,
            "expected_delta": plan.expected_delta,
            "expected_delta_same_engine": delta_against_one_shot(option.engine,
                                                                 stage_traits(stage), plan.nu),
            "choice": None if choice is None else choice.reason,
            "refine_seconds": plan.refine_seconds, "head_start_seconds": plan.head_start,
            "base_seconds": plan.base_seconds,
            "nu_limit": plan.nu_limit, "n_increment": plan.n_increment,
            "compute_after_close_seconds": plan.compute_after_close + plan.refine_seconds,
            "finish_after_close_seconds": plan.finish_after_close,
            "release_after_close_seconds": plan.finish_after_close + live.release_overhead(n),
            "t_ref_seconds": model(n),
            "arrival_coefficient": plan.arrival_coefficient, "mode": plan.mode,
            "warnings": list(plan.warnings), "window_warning": warning}


def send_times(arrivals: Any, n: int, survey_duration: float, speedup: float,
               seed: int) -> np.ndarray:
    """When each of the ``n`` responses is produced, in wall seconds after the opening: the
    profile's moments compressed ``speedup`` times, then squeezed so that the last one is due
    :data:`PRODUCER_MARGIN_SECONDS` (or 2 % of a short window, but never less than the
    producer's batching and a tenth of a second) before the close, so that the producer's own
    lag cannot push a response past the close (it would be dead-lettered)."""
    open_seconds = survey_duration / speedup
    margin = min(PRODUCER_MARGIN_SECONDS,
                 max(0.02 * open_seconds, PRODUCER_LINGER_MS / 1000 + 0.1))
    times = np.asarray(arrivals.times(n, survey_duration, seed), dtype=np.float64) / speedup
    return times * ((open_seconds - margin) / open_seconds)


def run_simulation(*, profile: str = "uniform", n: int = 20_000, m: int = 15, k: int = 10,
                   survey_duration: float = 36_000.0, speedup: float = 600.0,
                   deadline: float | None = None, engine: str = "mdav",
                   incremental: str = "auto", data: str = "gaussian",
                   out: str | Path = "simulation", dry_run: bool = False, seed: int = 7,
                   http: str | None = None, linger: float = 0.0,
                   survey: str = SURVEY, progress: Progress = log.info,
                   refine: str | float = "off", objective: str = "balanced",
                   max_delta: float = DEFAULT_MAX_DELTA, min_nu: float = 0.0,
                   reference: str = "compute", bootstrap: str | None = None) -> dict[str, Any]:
    """Run one simulation (see the module docstring); returns the summary it writes.
    ``bootstrap``: run on the Kafka there (Apache Kafka, say) instead of an embedded broker.

    ``objective``, ``max_delta`` and ``min_nu`` are the survey's (``"balanced"``: the
    latest safe base snapshot within the quality bound; ``"earliest"``: the paper's nu*; the
    floor on the ratio). ``reference`` is how the
    one-shot run it is compared with is measured: ``"compute"`` times the engine on all
    records in this process; ``"release"`` releases the same records through the service
    with the engine at close (:func:`one_shot_release`), so the comparison is release
    against release, the same steps after close on both sides; ``"none"`` measures nothing
    (a caller that measures the reference once for several runs).

    Besides the report, ``out/dashboard.html`` is the dashboard's final state as one
    self-contained page (it opens without the service)."""

    if n < 3 * k or k < 1 or survey_duration <= 0 or speedup <= 0:
        raise ValueError("need n >= 3k, k >= 1, a positive survey duration and speedup")
    if reference not in ("compute", "release", "none"):
        raise ValueError(f"reference must be compute, release or none, not {reference!r}")
    out = Path(out)
    arrivals = resolve(profile, survey_duration)
    survey_data = make_data(data, n, m, seed)
    n, m = survey_data.X.shape
    open_seconds = survey_duration / speedup
    compressed_deadline = None if deadline is None else deadline / speedup
    out.mkdir(parents=True, exist_ok=True)
    engines = auto_engine_names() if engine == "auto" else (engine,)
    models = {e: calibrated_model(out, e, m, k, progress) for e in engines}
    split = models.get("mdav")  # NN-split-end splits with MDAV, whatever the base engine
    request = simulated_request(k=k, engine=engine, incremental=incremental,
                                deadline=compressed_deadline, refine=refine,
                                objective=objective, max_delta=max_delta, min_nu=min_nu)
    prediction = predict(arrivals, n, open_seconds, request,
                         candidates(models, incremental, m, k, split))
    model = models[prediction["engine"] or engine]
    summary: dict[str, Any] = {
        "profile": arrivals.name, "n": n, "m": m, "k": k, "engine": engine,
        "incremental": incremental, "refine": refine, "data": survey_data.description,
        "survey_duration_seconds": survey_duration, "speedup": speedup,
        "open_seconds": open_seconds, "deadline_seconds": deadline,
        "compressed_deadline_seconds": compressed_deadline,
        "objective": objective, "max_delta": None if objective == "earliest" else max_delta,
        "min_nu": min_nu, "cost_model": {"a": model.a, "b": model.b}, "prediction": prediction,
        "dry_run": dry_run, "survey": survey,
    }
    times = send_times(arrivals, n, survey_duration, speedup, seed)
    if dry_run:
        summary["one_shot_estimate_seconds"] = model(n)
        write_report(out, summary, times, None)
        return summary
    fresh_output(out, survey, progress)
    dashboard: dict[str, Any] = {}
    report = run_pipeline(survey_data, times, out=out, k=k, open_seconds=open_seconds,
                          engine=engine, incremental=incremental,
                          deadline=compressed_deadline, http=http, linger=linger,
                          survey=survey, dashboard=dashboard, progress=progress,
                          refine=refine, objective=objective, max_delta=max_delta,
                          min_nu=min_nu, bootstrap=bootstrap)
    if engine == "auto":  # the engine the planner chose for the base run
        summary["configured_engine"] = "auto"
        summary["engine"] = engine = report["engine"]
        summary["engine_choice"] = report.get("engine_choice")
    if incremental == "auto":  # the stage chosen at close (None: no base run was used)
        summary["configured_incremental"] = "auto"
        summary["incremental"] = report.get("incremental")
        summary["incremental_choice"] = report.get("incremental_choice")
    one_shot_release_seconds = one_shot_steps = None
    one_shot_seconds = one_shot_d = None
    if reference == "release":
        progress(f"released; now the one-shot release of the same {n:,} records for "
                 "comparison ...")
        ref = one_shot_release(survey_data, out=out, k=k, engine=engine, progress=progress,
                               bootstrap=bootstrap)
        one_shot_steps = ref["close_steps_seconds"]
        one_shot_seconds = float(one_shot_steps["compute"])
        one_shot_release_seconds = float(ref["close_to_release_seconds"])
        one_shot_d = float(ref["distortion"])
    elif reference == "compute":
        progress(f"released; timing the one-shot {engine} run on the same {n:,} records for "
                 "comparison ...")
        one_shot_seconds, one_shot_d = one_shot(survey_data.X, k, engine)
    summary["release"] = {key: report.get(key) for key in (
        "release_id", "n", "mode", "nu", "n_base", "planned_nu", "arrival_coefficient",
        "predicted_seconds_after_close", "predicted_release_seconds",
        "close_to_release_seconds",
        "compute_seconds_after_close", "close_steps_seconds", "base_seconds",
        "incremental_seconds",
        "one_shot_estimate_seconds", "distortion", "information_loss", "rejected",
        "base_started_at", "closed_at", "released_at", "opened_at", "spliced",
        "base_steps_seconds", "base_plan")}
    summary["release"]["files"] = report.get("files")
    summary["records_not_released"] = n - int(report["n"])
    summary["one_shot_seconds"] = one_shot_seconds
    summary["one_shot_release_seconds"] = one_shot_release_seconds
    summary["one_shot_close_steps_seconds"] = one_shot_steps
    summary["one_shot_distortion"] = one_shot_d
    # how many times sooner after close than the one-shot release (or, measured by
    # compute alone, than its compute); below 1 it was later
    versus = one_shot_seconds if one_shot_release_seconds is None else one_shot_release_seconds
    after = report["close_to_release_seconds"]
    summary["sooner"] = versus / after if versus is not None and after > 0 else None
    summary["delta"] = (report["distortion"] / one_shot_d - 1 if one_shot_d else None)
    summary["deadline_met"] = (None if deadline is None else
                               report["close_to_release_seconds"] <= compressed_deadline)
    write_report(out, summary, times, report)
    write_dashboard_snapshot(out / "dashboard.html", dashboard["status"], survey,
                             one_shot_seconds)
    return summary


def write_dashboard_snapshot(path: Path, status: dict[str, Any], survey: str,
                             one_shot_seconds: float) -> Path:
    """The dashboard's final state as one page; the one-shot time measured after the release
    is added to the survey's release box."""

    for entry in status["surveys"]:
        if entry["id"] == survey and entry.get("release"):
            entry["release"]["one_shot_measured_seconds"] = one_shot_seconds
    page = snapshot_html(status)
    atomic_write(path, lambda tmp: Path(tmp).write_text(page, encoding="utf-8"))
    return path


def write_report(out: Path, summary: dict[str, Any], times: np.ndarray,
                 report: dict[str, Any] | None) -> Path:
    """``simulation.json``, ``arrivals.png`` and ``report.md`` in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    write_json(summary, out / "simulation.json")
    fig, ax = plt.subplots(figsize=(8, 4.2))
    ax.plot(times, np.arange(1, len(times) + 1), label=f"arrivals ({summary['profile']})")
    close = summary["open_seconds"]
    marks = [("close", close, "tab:red")]
    pred = summary["prediction"]
    if pred["nu"] and pred["head_start_seconds"] is not None:
        marks.append(("planned snapshot (forecast)", close - pred["head_start_seconds"],
                      "tab:gray"))
    if report is not None:
        opened = report["opened_at"]
        if report.get("base_started_at"):
            marks.append(("base snapshot", report["base_started_at"] - opened, "tab:orange"))
        marks.append(("release", report["released_at"] - opened, "tab:green"))
        if summary["compressed_deadline_seconds"] is not None:
            marks.append(("deadline", close + summary["compressed_deadline_seconds"],
                          "tab:purple"))
    for label, at, colour in marks:
        ax.axvline(at, color=colour, linestyle="--", label=f"{label} ({at:.1f} s)")
    ax.set_xlabel(f"seconds since opening (compressed {summary['speedup']:g}x)")
    ax.set_ylabel("responses sent")
    ax.legend(fontsize=8, loc="upper left")
    fig.savefig(out / "arrivals.png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    (out / "report.md").write_text(_markdown(summary))
    return out / "report.md"


def _fmt(x: Any, spec: str = ".3f", unit: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{unit}"


def _markdown(s: dict[str, Any]) -> str:
    p = s["prediction"]
    lines = [
        f"# Simulation: {s['profile']} arrivals, {s['n']:,} x {s['m']}, k = {s['k']}",
        "",
        f"Data: {s['data']}. Engines: {s['engine']} + {s['incremental']}. Survey of "
        f"{s['survey_duration_seconds']:g} s compressed {s['speedup']:g}x to "
        f"{s['open_seconds']:.1f} s; compute times are real. Cost model t = "
        f"{s['cost_model']['a']:.3g} n^{s['cost_model']['b']:.3f} s."
        + ("" if s["deadline_seconds"] is None else
           f" Deadline {s['deadline_seconds']:g} s after close "
           f"({s['compressed_deadline_seconds']:.2f} s compressed)."),
        "",
        *([f"Base engine: the planner's choice (engine = auto): {p['engine']}, expected IL "
           f"{100 * p['expected_delta']:+.1f} % against one-shot MDAV ({p['choice']}).", ""]
          if p.get("choice") else []),
        "![arrivals](arrivals.png)",
        "",
        "| quantity | predicted (forecast = profile) | achieved |",
        "|---|---:|---:|",
    ]
    r = s.get("release")
    if r is None:
        lines += [
            f"| nu | {_fmt(p['nu'], '.4f')} | (dry run) |",
            f"| base snapshot before close | {_fmt(p['head_start_seconds'], '.2f', ' s')} | |",
            f"| close to release (compute) | {_fmt(p['finish_after_close_seconds'], '.2f', ' s')}"
            " | |",
            f"| close to release (total) | {_fmt(p['release_after_close_seconds'], '.2f', ' s')}"
            " | |",
            f"| one-shot time (cost model) | {_fmt(s['one_shot_estimate_seconds'], '.2f', ' s')}"
            " | |",
            f"| arrival coefficient s | {_fmt(p['arrival_coefficient'], '.2f')} | |",
        ]
        return "\n".join(lines) + "\n"
    before = (r["closed_at"] - r["base_started_at"]) if r.get("base_started_at") else None
    delta = None if s["delta"] is None else 100 * s["delta"]
    lines += [
        f"| mode | {p['mode']} | {r['mode']} |",
        f"| nu (late records) | {_fmt(p['nu'], '.4f')} | {_fmt(r['nu'], '.4f')} "
        f"(live plan {_fmt(r['planned_nu'], '.4f')}) |",
        f"| base snapshot before close | {_fmt(p['head_start_seconds'], '.2f', ' s')} | "
        f"{_fmt(before, '.2f', ' s')} |",
        f"| arrival coefficient s | {_fmt(p['arrival_coefficient'], '.2f')} | "
        f"{_fmt(r['arrival_coefficient'], '.2f')} |",
        f"| close to release, compute | {_fmt(p['compute_after_close_seconds'], '.2f', ' s')} "
        f"| {_fmt(r['compute_seconds_after_close'], '.2f', ' s')} |",
        f"| close to release, total | {_fmt(p['release_after_close_seconds'], '.2f', ' s')} "
        f"(with the overhead model) | {_fmt(r['close_to_release_seconds'], '.2f', ' s')} "
        f"(drain, compute, gate, files, publish; live plan "
        f"{_fmt(r.get('predicted_release_seconds'), '.2f', ' s')}) |",
        f"| one-shot time | {_fmt(r['one_shot_estimate_seconds'], '.2f', ' s')} (cost model) | "
        f"{_fmt(s['one_shot_seconds'], '.2f', ' s')} (measured) |",
        f"| one-shot release, close to release | | "
        f"{_fmt(s.get('one_shot_release_seconds'), '.2f', ' s')} (measured) |",
        f"| times sooner than the one-shot | | {_fmt(s.get('sooner'), '.1f', 'x')} |",
        f"| records released | {s['n']:,} | {r['n']:,} |",
        f"| D of the release | | {_fmt(r['distortion'], '.4f')} (IL "
        f"{_fmt(r['information_loss'], '.2f', ' %')}) |",
        f"| D of the one-shot release | | {_fmt(s['one_shot_distortion'], '.4f')} |",
        f"| delta = D / D_one_shot - 1 | | {_fmt(delta, '+.2f', ' %')} |",
    ]
    if s["deadline_seconds"] is not None:
        lines.append(f"| deadline met | | {'yes' if s['deadline_met'] else 'NO'} |")
    dead = r.get("rejected") or {}
    lines += ["", f"Dead-lettered: {sum(dead.values())} "
              f"({', '.join(f'{key}: {v}' for key, v in sorted(dead.items())) or 'none'}). "
              f"Release files: `releases/{s['survey']}/release.parquet` and `release.csv`; "
              f"the data holder's report: `reports/{s['survey']}/report.json`; the "
              "dashboard's final state: `dashboard.html`."]
    return "\n".join(lines) + "\n"
