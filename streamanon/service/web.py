"""HTTP interface of the service: status for people and tools, control with a bearer token.

- ``GET /``: the dashboard (static HTML, CSS and JS shipped in ``streamanon/service/static``).
- ``GET /healthz``: 200 ``ok`` while every part of the service (collector, compute process,
  store, publisher) works; 503 ``unhealthy: PART, ...`` and one line per failing part
  otherwise (``streamanon.service.health``).
- ``GET /api/status``: JSON of every survey's state, counts, plan and release summary, the
  health of each part (``health``) and, with several instances on one PostgreSQL store, this
  instance's role (``instance``: ``leader`` or ``follower``, and the leader's name and address;
  ``streamanon.service.leadership``).
- ``GET /metrics``: Prometheus metrics (``streamanon.service.telemetry``).

``/api/status`` and ``/metrics`` answer everyone with counts, times and plans; the fields
computed on the raw answers (``reports.RAW_DERIVED``: the release's distortion and information
loss, the dead letters by reason) only a request with the control token (``Authorization:
Bearer TOKEN``) gets: a statistic of the raw answers is raw data too.
- ``POST /api/surveys/{id}/close``: close now (``Authorization: Bearer TOKEN``); on a follower
  the close is stored and the leader carries it out (202, naming the leader). 202 means the
  close is recorded in the store; while the store cannot be reached the answer is 503 with
  ``Retry-After``, and nothing is recorded.
- ``POST /api/surveys/{id}/submissions``: a survey response, for a survey with
  ``[surveys.webhook]`` (HTTP Basic auth; KoboToolbox REST Services or plain JSON):
  answered 202 once it is on the responses topic (``streamanon.service.webhook``).
- ``POST /api/surveys/{id}/base``: take the base snapshot and start the base run now (token);
  a follower answers 409 with the leader's name and address; 503 with ``Retry-After`` while
  the store cannot be reached.

Binds to loopback by default (``http.bind``). Responses never contain a survey's values, and
none without the token a statistic computed on them.
:func:`start_http` also runs the :class:`~streamanon.service.health.HealthMonitor`, which feeds the
systemd watchdog while the service is healthy, for as long as the HTTP server runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from streamanon.service.health import HealthMonitor, liveness, summary
from streamanon.service.states import OPEN
from streamanon.service.store import StoreUnavailable
from streamanon.service.telemetry import CONTENT_TYPE
from streamanon.service.webhook import WebhookIntake

STATIC = Path(__file__).with_name("static")


def snapshot_html(status: dict[str, Any]) -> str:
    """The dashboard frozen at ``status`` (an ``/api/status`` document) as one self-contained
    page: styles, chart library, script and the status inlined, so it opens from a file with no
    service running (the demo writes it at the end). Counts and times only, like the status."""
    import json

    def inline(name: str) -> str:
        return (STATIC / name).read_text(encoding="utf-8")

    # "</" inside a <script> element would end it early; JSON allows "<\/" for "</"
    data = json.dumps(status).replace("</", "<\\/")
    page = inline("index.html")
    page = page.replace('<link rel="stylesheet" href="/static/vendor/uPlot.min.css">',
                        f"<style>{inline('vendor/uPlot.min.css')}</style>")
    page = page.replace('<link rel="stylesheet" href="/static/style.css">',
                        f"<style>{inline('style.css')}</style>")
    page = page.replace('<script src="/static/vendor/uPlot.iife.min.js"></script>',
                        f"<script>{inline('vendor/uPlot.iife.min.js')}</script>")
    page = page.replace('<script src="/static/app.js"></script>',
                        f"<script>window.STREAMANON_SNAPSHOT = {data};</script>\n"
                        f"  <script>{inline('app.js')}</script>")
    if "/static/" in page:
        raise RuntimeError("snapshot_html: index.html references an asset it did not inline")
    return page


def _authorised(service: Any, request: web.Request) -> bool:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and service.check_token(token.strip())


#: Headers of an answer that depends on the token: never cached, nor served to another
#: reader by a cache.
PRIVATE_ANSWER = {"Cache-Control": "no-store", "Vary": "Authorization"}

#: What a command answered 503 tells the client to wait before it tries again, in seconds.
RETRY_AFTER_SECONDS = 5


def _store_down(sid: str, command: str) -> web.Response:
    """503: the store cannot be reached, so the command is not recorded; the client (or the
    operator) tries again, as ``Retry-After`` says."""
    return web.json_response(
        {"survey": sid, "error": f"the store cannot be reached: the {command} is not "
                                 f"recorded; retry in {RETRY_AFTER_SECONDS} s"},
        status=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


async def _bounded_body(request: web.Request, limit: int) -> bytes | None:
    """The request's body, or None when it is longer than ``limit`` bytes (read no further)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def make_app(service: Any) -> web.Application:
    app = web.Application()

    async def healthz(request: web.Request) -> web.Response:
        """Readiness: every part, the broker included."""
        ok, text = summary(await service.health())
        return web.Response(text=text, status=200 if ok else 503,
                            headers={"Cache-Control": "no-store"})

    async def livez(request: web.Request) -> web.Response:
        """Liveness: the parts a restart may repair (not the broker)."""
        ok, text = summary(liveness(await service.health()))
        return web.Response(text=text, status=200 if ok else 503,
                            headers={"Cache-Control": "no-store"})

    def instance() -> dict[str, Any]:
        coordinator = getattr(service, "coordinator", None)
        return {"role": "leader"} if coordinator is None else coordinator.describe()

    async def status(request: web.Request) -> web.Response:
        current = await service.status()
        if not _authorised(service, request):  # raw-derived fields for the data holder only
            current = current.public()
        body = current.to_json()
        body["instance"] = instance()
        return web.json_response(body, headers=PRIVATE_ANSWER)

    async def metrics(request: web.Request) -> web.Response:
        current = await service.status()
        holder = _authorised(service, request)  # raw-derived series for the data holder only
        surveys = current.surveys if holder else current.public().surveys
        return web.Response(body=service.telemetry.exposition(surveys, raw_derived=holder),
                            headers={"Content-Type": CONTENT_TYPE, **PRIVATE_ANSWER})

    async def dashboard(request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    def _survey(request: web.Request) -> str:
        sid = request.match_info["survey"]
        if sid not in service.surveys:
            raise web.HTTPNotFound(text=f"unknown survey {sid!r}\n")
        if not _authorised(service, request):
            raise web.HTTPUnauthorized(text="missing or wrong bearer token\n",
                                       headers={"WWW-Authenticate": "Bearer"})
        return sid

    async def close(request: web.Request) -> web.Response:
        sid = _survey(request)
        try:
            await service.close(sid)
        except StoreUnavailable:
            return _store_down(sid, "close")
        body: dict[str, Any] = {"survey": sid, "closing": True}
        if instance()["role"] == "follower":
            body["leader"] = instance()["leader"]  # stored here, carried out there
        return web.json_response(body, status=202)

    async def base(request: web.Request) -> web.Response:
        sid = _survey(request)
        if instance()["role"] == "follower":
            return web.json_response(
                {"survey": sid, "started": False, "leader": instance()["leader"],
                 "reason": "this instance is a follower: ask the leader"}, status=409)
        try:
            started = await service.start_base(sid, None)
        except StoreUnavailable:
            return _store_down(sid, "base run")
        if not started:
            surveys = (await service.status()).surveys
            current = next(s.state for s in surveys if s.id == sid)
            return web.json_response(
                {"survey": sid, "started": False,
                 "reason": "a base run needs an open survey with at least 2k records"
                 if current == OPEN else f"survey is {current}"}, status=409)
        return web.json_response({"survey": sid, "started": True}, status=202)

    intakes: list[WebhookIntake] = []  # made at the first submission

    async def submissions(request: web.Request) -> web.Response:
        if not intakes:
            intakes.append(WebhookIntake(service.config, service.producer, service.telemetry,
                                         store=service.store))
        intake = intakes[0]
        sid = request.match_info["survey"]
        if sid not in intake.surveys:
            raise web.HTTPNotFound(text=f"no submissions endpoint for survey {sid!r}\n")
        status, answer, headers = await intake.submit(
            sid, authorization=request.headers.get("Authorization"),
            client=intake.client(sid, request.remote, request.headers.get("X-Forwarded-For")),
            body=await _bounded_body(request, intake.surveys[sid].webhook.max_body_bytes))
        return web.json_response(answer, status=status,
                                 headers={"Cache-Control": "no-store", **headers})

    async def close_intake(app: web.Application) -> None:
        for intake in intakes:
            intake.close()

    app.on_cleanup.append(close_intake)
    app.router.add_get("/", dashboard)
    app.router.add_static("/static/", STATIC, follow_symlinks=False)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", livez)
    app.router.add_get("/api/status", status)
    app.router.add_post("/api/surveys/{survey}/close", close)
    app.router.add_post("/api/surveys/{survey}/base", base)
    app.router.add_post("/api/surveys/{survey}/submissions", submissions)
    return app


async def start_http(service: Any, host: str, port: int) -> web.AppRunner:
    """Serve :func:`make_app` on ``host:port`` and start the health monitor (``READY=1`` to
    systemd); ``runner.cleanup()`` stops both (``STOPPING=1``)."""
    app = make_app(service)
    monitor = HealthMonitor(service.health)

    async def stop_monitor(app: web.Application) -> None:
        await monitor.stop()

    app.on_cleanup.append(stop_monitor)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    monitor.start()
    return runner
