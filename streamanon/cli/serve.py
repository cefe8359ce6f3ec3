"""The service from the command line: ``serve``, ``close``, ``demo``, ``broker``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import urllib.error
import urllib.request

from streamanon.errors import StreamanonError


def register(sub: argparse._SubParsersAction) -> None:
    from streamanon.simulation import demo_defaults as demo

    se = sub.add_parser(
        "serve",
        help="run the streaming service (collector, planner, base run, release)",
        description=(
            "Consume survey responses from Kafka, store them, start each survey's base run at "
            "the planned moment, and at close publish one k-anonymous release. Secrets come "
            "from STREAMANON_HMAC_KEY[_FILE] and STREAMANON_HTTP_TOKEN[_FILE]; any "
            "STREAMANON_<SECTION>_<KEY> overrides the file. Stop with Ctrl-C, SIGTERM or "
            "SIGHUP (each stops the service gracefully, and an embedded broker with it)."
        ),
    )
    se.add_argument("--config", required=True, metavar="FILE", help="streamanon.toml")
    se.add_argument("--embedded-broker", action="store_true",
                    help="start the embedded Kafka-compatible broker (Tansu) on a free "
                         "loopback port and use it instead of kafka.bootstrap_servers")
    se.add_argument("--log-level", default="info",
                    choices=["debug", "info", "warning", "error"])
    se.add_argument("--log-format", default="text", choices=["text", "json"],
                    help="text lines, or one JSON object per line with survey id and state "
                         "(default text)")
    se.set_defaults(handler=cmd_serve)

    cl = sub.add_parser(
        "close",
        help="close a survey now (asks the running service over HTTP or Kafka)",
        description=(
            "POST /api/surveys/SURVEY/close to the running service, with the bearer token "
            "from STREAMANON_HTTP_TOKEN[_FILE]; or, with --via-kafka, send a control message "
            "signed with that token (HMAC, never the token itself) to the configuration's "
            "<prefix>.control topic, for when the HTTP port is not reachable. The service "
            "stops accepting records, finishes the base run if one is running, and publishes "
            "the release."
        ),
    )
    cl.add_argument("survey", metavar="SURVEY")
    group = cl.add_mutually_exclusive_group(required=True)
    group.add_argument("--config", metavar="FILE",
                       help="take the service address (or, with --via-kafka, the brokers and "
                            "topic prefix) from here")
    group.add_argument("--url", help="service address, e.g. http://127.0.0.1:8080")
    cl.add_argument("--via-kafka", action="store_true",
                    help="send a signed control message over Kafka instead (needs --config)")
    cl.set_defaults(handler=cmd_close)

    de = sub.add_parser(
        "demo",
        help="the end-to-end demo on the embedded broker (or the Kafka at --bootstrap)",
        description=(
            "Read (or calibrate) the base engine's cost model on this machine, size a "
            "synthetic survey so that the schedule matters (the number of responses and how "
            "long it is open follow from the predicted one-shot time; --n and --open-seconds "
            "override), then start the embedded broker and the service, let the planner start "
            "the ONA* base run when it computes, close on time, absorb the late responses with "
            "NN-split-end and publish the release; then release the same records one-shot at "
            "close for the comparison. Prints the planned against the achieved schedule (nu, "
            "head start, close-to-release), the one-shot release measured on the same records, "
            "D and delta; writes OUT/report.md, OUT/simulation.json, OUT/dashboard.html (the "
            "dashboard's final state, the data holder's, with its measures), the release under "
            "OUT/releases/demo/ and its report under OUT/reports/demo/. About three minutes on "
            "two cores after set-up (--budget), plus about a minute of calibration and kernel "
            "compilation on the first run."
        ),
    )
    de.add_argument("--n", type=int, default=None,
                    help="responses (default: sized from the cost model)")
    de.add_argument("--m", type=int, default=demo.M,
                    help=f"quasi-identifiers (default {demo.M})")
    de.add_argument("--k", type=int, default=demo.K,
                    help=f"anonymity parameter (default {demo.K})")
    de.add_argument("--open-seconds", type=float, default=None,
                    help="how long the survey is open (default: sized from the cost model)")
    de.add_argument("--budget", type=float, default=demo.BUDGET_SECONDS, metavar="SECONDS",
                    help="about how long the demo may take after set-up when it sizes the "
                         f"scenario (default {demo.BUDGET_SECONDS:g})")
    de.add_argument("--dry-run", action="store_true",
                    help="only size the scenario and plan it (written to OUT/scenario.json); "
                         "runs no survey")
    de.add_argument("--speed", type=float, default=1.0, metavar="X",
                    help="with --dry-run: size the scenario for a machine X times faster "
                         "(the cost model divided by X)")
    de.add_argument("--engine", default=demo.ENGINE,
                    help=f"base engine (default {demo.ENGINE}; see `streamanon engines`)")
    de.add_argument("--incremental", default=demo.INCREMENTAL,
                    help=f"incremental stage (default {demo.INCREMENTAL}: the planner chooses "
                         "NN-split-end or 2MDAV, as the service does)")
    de.add_argument("--seed", type=int, default=7, help="seed of the data (default 7)")
    de.add_argument("--out", default="demo-output", help="output directory (./demo-output)")
    de.add_argument("--log-level", default="warning",
                    choices=["debug", "info", "warning", "error"])
    de.add_argument("--log-format", default="text", choices=["text", "json"],
                    help="log lines as text or JSON (default text)")
    de.add_argument("--http", default=None, metavar="HOST:PORT",
                    help="serve the dashboard (/), /api/status and /metrics here during the "
                         "demo (default: a free loopback port)")
    de.add_argument("--bootstrap", default=None, metavar="HOST:PORT[,...]",
                    help="run on the Kafka brokers there (Apache Kafka, say; plain text, new "
                         "topics and group for each run) instead of the embedded broker")
    de.add_argument("--linger", type=float, default=0.0, metavar="SECONDS",
                    help="keep the service and the dashboard up this long after the release, "
                         "so a person can look (default 0)")
    de.set_defaults(handler=cmd_demo)

    br = sub.add_parser(
        "broker",
        help="run the embedded Kafka-compatible broker for local use",
        description="Start Tansu (in-memory) on a loopback port and print the bootstrap "
                    "address; stop with Ctrl-C, SIGTERM or SIGHUP (each stops the broker "
                    "too).",
    )
    br.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    br.set_defaults(handler=cmd_broker)


def _logging(args: argparse.Namespace) -> None:
    from streamanon.service.logs import setup_logging

    setup_logging(args.log_level, args.log_format)


def cmd_serve(args: argparse.Namespace) -> int:
    from streamanon.service.broker import EmbeddedBroker
    from streamanon.service.config import load_config
    from streamanon.service.lifecycle import serve

    config = load_config(args.config)
    _logging(args)
    broker = None
    try:
        if args.embedded_broker:
            # Until the service's own handlers take over (``serve`` stops gracefully on
            # SIGINT, SIGTERM and SIGHUP), a signal must still reach the ``finally`` below.
            _stop_on_signals()
            broker = EmbeddedBroker()
            bootstrap = broker.start()
            config = config.model_copy(update={"kafka": config.kafka.model_copy(
                update={"bootstrap_servers": bootstrap})})
            print(f"embedded broker at {bootstrap}", flush=True)
        runner = asyncio.Runner()  # not ``with``: its __enter__ builds the loop unguarded
        try:
            _build_loop(runner)
            runner.run(serve(config, on_ready=lambda service: print(
                f"serving {len(config.surveys)} survey(s); HTTP on http://{config.http.bind}",
                flush=True)))
        finally:
            runner.close()
    except KeyboardInterrupt:
        if broker is None:
            raise
    finally:
        if broker is not None:
            broker.stop()
    return 0


def _token() -> str:
    token = os.environ.get("STREAMANON_HTTP_TOKEN", "")
    path = os.environ.get("STREAMANON_HTTP_TOKEN_FILE")
    if path and not token:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    if not token:
        raise StreamanonError("set STREAMANON_HTTP_TOKEN or STREAMANON_HTTP_TOKEN_FILE")
    return token


def _close_via_kafka(args: argparse.Namespace) -> int:
    from streamanon.service.config import load_config
    from streamanon.service.control import sign
    from streamanon.service.kafka_clients import KafkaSettings, client_error, producer

    if not args.config:
        raise StreamanonError("--via-kafka needs --config (brokers and topic prefix)")
    config = load_config(args.config, require_secrets=False)
    if config.kafka.security_protocol.startswith("SASL_") and not config.kafka_sasl_password:
        raise StreamanonError("set STREAMANON_KAFKA_SASL_PASSWORD or "
                              "STREAMANON_KAFKA_SASL_PASSWORD_FILE (kafka.security_protocol is "
                              f"{config.kafka.security_protocol})")
    topic = config.control_topic
    try:
        sender = producer(KafkaSettings.from_config(config))
        sender.send(topic, value=sign("close", args.survey, _token())).result(timeout=30)
        sender.close()
    except (client_error(), TimeoutError) as exc:
        raise StreamanonError(f"cannot send the control message to {topic}: "
                              f"{type(exc).__name__}") from None
    print(f"survey {args.survey}: close requested on {topic} (signed control message); the "
          "release follows")
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    if args.via_kafka:
        return _close_via_kafka(args)
    if args.config:
        from streamanon.service.config import load_config

        config = load_config(args.config, require_secrets=False)
        base = f"http://{config.http.bind}"
    else:
        base = args.url.rstrip("/")
    request = urllib.request.Request(f"{base}/api/surveys/{args.survey}/close", method="POST",
                                     headers={"Authorization": f"Bearer {_token()}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip()
        raise StreamanonError(f"the service refused: HTTP {exc.code} {detail}") from None
    except urllib.error.URLError as exc:
        raise StreamanonError(f"cannot reach the service at {base}: {exc.reason}") from None
    print(f"survey {body.get('survey', args.survey)}: closing; the release follows")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from streamanon.engines import get_engine
    from streamanon.incremental import get_stage
    from streamanon.simulation.demo import run_demo

    if (args.n is not None and args.n < 3 * args.k) or args.m < 1 or args.k < 1 or (
            args.open_seconds is not None and args.open_seconds <= 0):
        raise StreamanonError("need --n >= 3k, --m >= 1, --k >= 1 and --open-seconds > 0")
    if not (args.budget > 0 and args.speed > 0):
        raise StreamanonError("--budget and --speed must be positive")
    if args.speed != 1.0 and not args.dry_run:
        raise StreamanonError("--speed plans for another machine: it needs --dry-run")
    if args.linger < 0:
        raise StreamanonError("--linger must be at least 0 seconds")
    get_engine(args.engine)
    if args.incremental != "auto":
        get_stage(args.incremental)
    _logging(args)
    run_demo(n=args.n, m=args.m, k=args.k, out=args.out, open_seconds=args.open_seconds,
             seed=args.seed, engine=args.engine, incremental=args.incremental,
             http=args.http, linger=args.linger, budget=args.budget, speed=args.speed,
             dry_run=args.dry_run, bootstrap=args.bootstrap)
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _build_loop(runner: asyncio.Runner) -> None:
    """Build ``runner``'s event loop with the stop signals only recorded: a signal that raised
    :class:`KeyboardInterrupt` inside the loop's constructor left a half-built loop whose
    finaliser printed a traceback at exit. A signal that arrived meanwhile stops the run once
    the loop is whole. (Blocking the signals would not do: the process has other threads, and
    the kernel hands a process-wide signal to one that does not block it.)"""
    import signal

    arrived: list[int] = []
    before = {sig: signal.signal(sig, lambda signum, frame: arrived.append(signum))
              for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        runner.get_loop()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if arrived:
        raise KeyboardInterrupt


def _stop_on_signals() -> None:
    """Stop on SIGTERM (a supervisor, `kill`, `timeout`) and SIGHUP (the terminal closed) as
    on Ctrl-C. Tansu runs in its own session (a Ctrl-C in the terminal reaches this process
    only), so this process must live to stop it instead of dying and leaving it running.
    SIGINT too: a process started with it ignored (a background job of a script, nohup)
    would otherwise never see a Ctrl-C or a ``kill -INT``."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _interrupt)


def cmd_broker(args: argparse.Namespace) -> int:
    import time

    from streamanon.service.broker import EmbeddedBroker

    _stop_on_signals()
    with EmbeddedBroker(port=args.port) as broker:
        try:  # the ready line inside: a signal may land while it is written
            print(f"embedded broker (Tansu, in-memory) at {broker.bootstrap}; Ctrl-C stops it",
                  flush=True)
            while broker.process is not None and broker.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0
