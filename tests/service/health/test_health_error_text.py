"""No error text carries a response value (design spec §9, reliability contract; issue 13,
finding 3).

A release writer that fails on a response value puts the value in its exception message
(pyarrow: ``Could not convert 'VALUE' with type str: tried to convert to int64``). The ingest
side keeps such values out; this is the defence behind it: when the writer fails anyway, the
survey's error in ``/api/status``, the dashboard, ``/metrics``, ``/healthz`` and the log (text
and JSON lines, tracebacks included) name the failure and the exception type, never the value.

The service runs in this process against the embedded broker, its compute pool in a thread, with
the release writer replaced by one that plants a sentinel value in a confidential column and
then calls the real writer.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
import urllib.error
import urllib.request
from typing import Any

import pyarrow as pa

import streamanon.service.publisher
import streamanon.service.releasing
from streamanon.errors import StreamanonError, describe_error, withheld
from streamanon.service.broker import free_port
from streamanon.service.config import load_config
from streamanon.service.lifecycle import Service
from streamanon.service.logs import JsonFormatter
from streamanon.service.web import snapshot_html, start_http
from tests.service.conftest import write_config
from tests.service.kafka_helpers import produce, response
from tests.service.lifecycle_helpers import ThreadComputePool

SURVEY = "wellbeing"
SENTINEL = "SENTINEL-c0nf1dential-7f3a"


def planting_a_value(write: Any) -> Any:
    """``write_release_files`` on a table whose last ``ticket`` (an int column) is a string."""

    def write_with_a_bad_value(frame: Any, *args: Any, **kwargs: Any) -> Any:
        frame = frame.copy()
        frame["ticket"] = frame["ticket"].astype(object)
        frame.loc[frame.index[-1], "ticket"] = SENTINEL
        return write(frame, *args, **kwargs)

    return write_with_a_bad_value


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.read().decode()


def test_a_writer_failure_on_a_value_shows_nowhere(broker, tmp_path, monkeypatch):
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=5)
    config = load_config(path, env)
    bad_writer = planting_a_value(streamanon.service.publisher.write_release_files)
    monkeypatch.setattr(streamanon.service.releasing, "write_release_files", bad_writer,
                        raising=False)
    monkeypatch.setattr(streamanon.service.publisher, "write_release_files", bad_writer)
    text_log, json_log = io.StringIO(), io.StringIO()
    handlers = [logging.StreamHandler(text_log), logging.StreamHandler(json_log)]
    handlers[0].setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handlers[1].setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    for handler in handlers:
        root.addHandler(handler)

    async def close_and_look() -> dict[str, str]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        port = free_port()
        runner = await start_http(service, "127.0.0.1", port)
        http = f"http://127.0.0.1:{port}"
        try:
            await asyncio.to_thread(produce, broker.bootstrap, config.topic(SURVEY, "responses"),
                                    [(None, response(i)) for i in range(40)])
            deadline = time.monotonic() + 60
            while (await service.status()).surveys[0].stored < 40:
                assert time.monotonic() < deadline, "records not stored"
                await asyncio.sleep(0.1)
            await service.close(SURVEY)
            while (status := await service.status()).surveys[0].error is None:
                assert time.monotonic() < deadline + 60, "the close neither failed nor ended"
                await asyncio.sleep(0.1)
            return {name: await asyncio.to_thread(fetch, http + route) for name, route in (
                ("status", "/api/status"), ("metrics", "/metrics"), ("dashboard", "/"),
                ("healthz", "/healthz"))} | {"snapshot": snapshot_html(status.to_json()),
                                             "error": status.surveys[0].error}
        finally:
            await runner.cleanup()
            await service.stop()

    try:
        seen = asyncio.run(close_and_look())
    finally:
        for handler in handlers:
            root.removeHandler(handler)
        root.setLevel(level)
    seen["log"], seen["json log"] = text_log.getvalue(), json_log.getvalue()

    # the failure is reported, with the exception type, and the log has the traceback
    assert seen["error"].startswith("close failed: ArrowInvalid"), seen["error"]
    assert "close failed" in seen["log"] and "Traceback (most recent call last)" in seen["log"]
    assert "write_release_files" in seen["log"]  # the frames are kept
    # the value is nowhere
    for where, text in seen.items():
        assert SENTINEL not in text, f"the response value leaked into {where}"
        assert SENTINEL[:12] not in text, f"part of the response value leaked into {where}"


def _arrow_error() -> pa.ArrowInvalid:
    try:
        pa.array([1, SENTINEL], type=pa.int64())
    except pa.ArrowInvalid as exc:
        return exc
    raise AssertionError("pyarrow accepted a string in an int64 array")


def test_describe_error_keeps_streamanon_messages_and_withholds_others():
    assert describe_error(StreamanonError("3 valid records: no 5-anonymous release exists")) \
        == "3 valid records: no 5-anonymous release exists"
    text = describe_error(_arrow_error())
    assert text.startswith("ArrowInvalid (message withheld") and SENTINEL not in text
    assert describe_error(OSError(28, "No space left on device", f"/data/{SENTINEL}")) \
        == "OSError: [Errno 28] No space left on device"


def test_withheld_keeps_the_traceback_and_the_chain_without_messages():
    import traceback

    try:
        try:
            raise _arrow_error()
        except pa.ArrowInvalid as exc:
            raise ValueError(f"column ticket: {exc}") from exc
    except ValueError as exc:
        caught = exc
    text = "".join(traceback.format_exception(withheld(caught)))
    assert SENTINEL not in text
    assert "pyarrow.lib.ArrowInvalid (message withheld" in text
    assert "WithheldError: ValueError (message withheld" in text
    assert "The above exception was the direct cause" in text
    assert "test_withheld_keeps_the_traceback_and_the_chain_without_messages" in text
