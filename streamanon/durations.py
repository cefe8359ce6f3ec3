"""Reading and writing durations the way people type them: ``2h``, ``1h30m``, ``90min``,
``45s``, ``1.5h``, or plain seconds."""

from __future__ import annotations

import math
import re

_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}
_PART = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``"2h"`` -> 7200, ``"1h30m"`` -> 5400, ``"90"`` -> 90.

    >>> parse_duration("1h 27.5min")
    5250.0
    """
    raw = str(text).strip().lower()
    if not raw:
        raise ValueError("empty duration")
    pos, total = 0, 0.0
    while pos < len(raw):
        match = _PART.match(raw, pos)
        if not match or match.end() == pos:
            raise ValueError(f"cannot read duration {text!r}; use e.g. 90s, 45min, 2h, 1h30m")
        value, unit = float(match.group(1)), match.group(2)
        if unit and unit not in _UNITS:
            raise ValueError(f"unknown unit {unit!r} in duration {text!r}")
        total += value * _UNITS.get(unit, 1)
        pos = match.end()
    return total


def format_duration(seconds: float) -> str:
    """``5250`` -> ``"1 h 27.5 min"``, ``153.3`` -> ``"153 s"``, inf -> ``"unbounded"``.

    >>> format_duration(5250)
    '1 h 27.5 min'
    """
    if math.isinf(seconds):
        return "unbounded"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 600:
        return f"{sign}{s:.3g} s" if s < 10 else f"{sign}{s:.0f} s"
    total_minutes = round(s / 60, 1)
    if total_minutes < 60:
        return f"{sign}{total_minutes:.1f} min"
    hours, minutes = divmod(total_minutes, 60)
    text = f"{minutes:.1f}".rstrip("0").rstrip(".")
    return f"{sign}{int(hours)} h {text} min" if minutes >= 0.05 else f"{sign}{int(hours)} h"
