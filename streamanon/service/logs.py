"""Logging set-up for the service commands: text for people, JSON lines for log pipelines.

Every record carries the survey id and the survey state when the code logging it knows them
(``extra={"survey": ..., "state": ...}``); state transitions are logged by the store as
``state transition`` with ``from_state`` and ``state``. Log messages hold ids, counts, states and
timings only, never a response value or a respondent id.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from streamanon.service.kafka_clients import CLIENT_LOGGERS, LIBRDKAFKA_CLIENTS_LOGGER

FORMATS = ("text", "json")
_EXTRA_KEYS = ("survey", "state", "from_state", "note")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (ISO 8601 UTC), ``level``, ``logger``, ``message``, the
    survey fields when present, and ``exception`` for tracebacks."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in _EXTRA_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class ClientErrors(logging.Filter):
    """One line per outage of the Kafka clients' warnings and errors
    (:data:`~.kafka_clients.CLIENT_LOGGERS`), instead of one a retry while a broker is away
    (a 20 s broker outage wrote 1,250 ERROR lines). The first of an outage is logged; the
    others are counted, and said with the next line logged: one a ``repeat`` seconds while
    it lasts, and the first after ``quiet`` seconds without any, which opens the next outage
    (or, with a message of the service's own saying the broker answers again, ends it).
    Other loggers pass untouched."""

    def __init__(self, quiet: float = 30.0, repeat: float = 60.0) -> None:
        super().__init__()
        self.quiet, self.repeat = quiet, repeat
        self._last_seen = self._last_logged = self._since = -float("inf")
        self._held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith(CLIENT_LOGGERS):
            return True
        now = record.created
        new_outage = now - self._last_seen > self.quiet
        self._last_seen = now
        if not new_outage and now - self._last_logged < self.repeat:
            self._held += 1
            return False
        if self._held:
            what = ("the last outage" if new_outage else "this outage")
            record.msg = (f"{record.getMessage()} ({self._held} more Kafka client "
                          f"warning(s) and error(s) in {what} since "
                          f"{time.strftime('%H:%M:%S', time.gmtime(self._since))} UTC, not "
                          "logged one by one)")
            record.args = ()
        if new_outage:
            self._since = now
        self._held = 0
        self._last_logged = now
        return True


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    """Configure the root logger on stderr; quieten the Kafka clients and the scheduler."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(ClientErrors())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiokafka", "apscheduler", LIBRDKAFKA_CLIENTS_LOGGER):
        logging.getLogger(noisy).setLevel(logging.WARNING)
