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


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    """Configure the root logger on stderr; quieten the Kafka clients and the scheduler."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiokafka", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.ERROR)
