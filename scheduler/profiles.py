"""Arrival profiles: when the n responses of a survey arrive, for simulations and planning.

Every profile is a seeded generator ``times(n, duration, seed) -> sorted array`` of arrival
moments in seconds from the opening, all in ``[0, duration]``, and has an expected cumulative
share ``cumulative(t / duration)`` in ``[0, 1]`` (the curve a forecast would assume). Profiles
with a density draw ``n`` i.i.d. moments from it (an order-statistics sample of the curve);
``poisson`` draws a Poisson process of rate ``n / duration`` conditioned on ``n`` events, which
is the same as ``uniform``'s sample; ``uniform`` is evenly spaced (the paper's deterministic
assumption); ``from_file`` reads real timestamps and rescales them to the duration.

Shapes (``u = t / duration``):

- ``uniform``: evenly spaced, the paper 001 assumption.
- ``poisson``: a homogeneous Poisson process (random gaps, same mean pace).
- ``front_loaded``: the invitation burst: density ``~ exp(-u / 0.15)``.
- ``back_loaded``: a rush before the close: density ``~ exp(-(1 - u) / 0.15)``.
- ``diurnal``: a day/night cycle of 24 h (in survey time): density ``~ 1 + 0.9 sin(2 pi h / 24
  - pi / 2)`` with ``h`` the hour since opening, so nights are quiet; with a duration of a few
  hours it is part of one day.
- ``reminders``: a base pace plus bursts after reminders at 0, 1/3 and 2/3 of the duration,
  each decaying with a time constant of 4 % of the duration.
- ``from_file``: a CSV with one timestamp per line (seconds, or ISO 8601), rescaled so the
  first is 0 and the last is ``duration``; resampled to ``n`` arrivals along its empirical
  cumulative curve.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

_GRID = 4097  # points of the cumulative curve used for inverse-transform sampling


@dataclass(frozen=True)
class Profile:
    """A named arrival profile: its density on ``[0, 1]`` (unnormalised), or a sampler."""

    name: str
    summary: str
    density: Callable[[np.ndarray], np.ndarray] | None = None

    def cumulative(self, u: np.ndarray | float) -> np.ndarray:
        """Expected share of the responses arrived by ``u = t / duration``."""
        grid, cdf = self._curve()
        return np.interp(np.clip(u, 0.0, 1.0), grid, cdf)

    def _curve(self) -> tuple[np.ndarray, np.ndarray]:
        grid = np.linspace(0.0, 1.0, _GRID)
        if self.density is None:
            return grid, grid
        f = np.maximum(self.density(grid), 0.0)
        cdf = np.concatenate([[0.0], np.cumsum((f[1:] + f[:-1]) / 2)])
        return grid, cdf / cdf[-1]

    def times(self, n: int, duration: float, seed: int | None = 0) -> np.ndarray:
        """``n`` sorted arrival moments in ``[0, duration]`` seconds."""
        _check(n, duration)
        rng = np.random.default_rng(seed)
        if self.name == "uniform":
            return (np.arange(n) + 0.5) * (duration / n)
        if self.name == "poisson":  # a Poisson process given n events: sorted uniforms
            return np.sort(rng.uniform(0.0, duration, n))
        grid, cdf = self._curve()
        return np.sort(np.interp(rng.uniform(0.0, 1.0, n), cdf, grid)) * duration


def _check(n: int, duration: float) -> None:
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if not duration > 0 or not math.isfinite(duration):
        raise ValueError(f"duration must be a positive number of seconds, got {duration}")


def _diurnal(u: np.ndarray, duration_hours: float = 24.0 * 7) -> np.ndarray:
    hours = u * duration_hours
    return 1.0 + 0.9 * np.sin(2 * np.pi * hours / 24.0 - np.pi / 2)


def _reminders(u: np.ndarray) -> np.ndarray:
    out = np.full_like(u, 0.4)
    for at in (0.0, 1 / 3, 2 / 3):
        after = u >= at
        out[after] += np.exp(-(u[after] - at) / 0.04)
    return out


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("uniform", "evenly spaced arrivals (paper 001's assumption)"),
    Profile("poisson", "Poisson process at a constant mean pace"),
    Profile("front_loaded", "invitation burst, then exponential decay",
            lambda u: np.exp(-u / 0.15)),
    Profile("back_loaded", "rush before the close", lambda u: np.exp(-(1.0 - u) / 0.15)),
    Profile("diurnal", "day/night cycle (24 h in survey time; a week by default)", _diurnal),
    Profile("reminders", "base pace plus bursts at reminders (0, 1/3, 2/3 of the duration)",
            _reminders),
)}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown arrival profile {name!r}; available: "
                         f"{', '.join([*PROFILES, 'FILE.csv'])}") from None


def diurnal(duration: float) -> Profile:
    """The day/night profile for a survey of ``duration`` seconds (24 h cycles)."""
    hours = duration / 3600.0
    return Profile("diurnal", PROFILES["diurnal"].summary, lambda u: _diurnal(u, hours))


def from_file(path: str | Path) -> Profile:
    """The empirical profile of the timestamps in ``path`` (one per line; a header line and
    other columns are ignored: the first field of each line is read)."""
    values = []
    for line_no, line in enumerate(Path(path).read_text().splitlines(), 1):
        text = line.split(",")[0].strip().strip('"')
        if not text:
            continue
        try:
            values.append(float(text))
        except ValueError:
            try:
                values.append(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())
            except ValueError:
                if values or line_no > 1:
                    raise ValueError(f"{path}:{line_no}: not a timestamp: {text!r}") from None
    if len(values) < 2:
        raise ValueError(f"{path}: need at least two timestamps, found {len(values)}")
    stamps = np.sort(np.asarray(values))
    if stamps[-1] == stamps[0]:
        raise ValueError(f"{path}: all timestamps are equal")
    share = (stamps - stamps[0]) / (stamps[-1] - stamps[0])
    ecdf = np.arange(1, len(share) + 1) / len(share)
    grid = np.linspace(0.0, 1.0, _GRID)
    cdf = np.interp(grid, share, ecdf, left=0.0)
    density = np.gradient(cdf, grid)
    return Profile(f"file:{Path(path).name}", f"timestamps from {path}",
                   lambda u: np.interp(u, grid, density))


def resolve(name: str, duration: float) -> Profile:
    """A profile by name, ``diurnal`` scaled to ``duration``, or a CSV path."""
    if name == "diurnal":
        return diurnal(duration)
    if name.endswith(".csv") or Path(name).is_file():
        return from_file(name)
    return get_profile(name)
