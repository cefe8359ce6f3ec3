"""A survey's states and the legal moves between them (persisted by the store, shown by the
web pages and the metrics)::

    OPEN -> BASE_RUNNING -> BASE_DONE -> CLOSING -> RELEASED
    OPEN -> CLOSING                    (closed before any base run)
    BASE_RUNNING -> OPEN               (a base run interrupted by a crash, to be re-planned)
"""

from __future__ import annotations

OPEN, BASE_RUNNING, BASE_DONE, CLOSING, RELEASED = (
    "OPEN", "BASE_RUNNING", "BASE_DONE", "CLOSING", "RELEASED")
STATES = (OPEN, BASE_RUNNING, BASE_DONE, CLOSING, RELEASED)
TRANSITIONS: dict[str, set[str]] = {
    OPEN: {BASE_RUNNING, CLOSING},
    BASE_RUNNING: {BASE_DONE, OPEN},
    BASE_DONE: {CLOSING},
    CLOSING: {RELEASED},
    RELEASED: set(),
}
