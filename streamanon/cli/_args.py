"""Argument types shared by the subcommands."""

from __future__ import annotations

import argparse
import json
from typing import Any


def columns(text: str) -> list[str]:
    cols = [c.strip() for c in text.split(",") if c.strip()]
    if not cols:
        raise argparse.ArgumentTypeError("expected a comma-separated list of column names")
    return cols


def duration(text: str) -> float:
    """Seconds from a duration as people type it (``90``, ``45s``, ``2min``, ``1h30m``)."""
    from streamanon.durations import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def share(text: str) -> float:
    """A number between 0 and 1 (a fraction, or t of t-closeness)."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def param(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), parse_value(raw.strip())


def parse_value(raw: str) -> Any:
    """``true``/``false``, an int, a float, a JSON object (``{...}``, e.g. the parameters of a
    wrapped engine), or else the string itself."""
    if raw.startswith("{"):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise argparse.ArgumentTypeError(f"not a valid JSON object: {raw!r} ({exc})") from None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"expected a JSON object, got {raw!r}")
        return value
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            return convert(raw)
        except ValueError:
            pass
    return raw
