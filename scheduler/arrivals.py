"""Arrival forecasts and the arrival-rate estimator.

A forecast answers the planner's one question: how many seconds before close will all but a
fraction ``nu`` of the final records have arrived (``head_start(nu)``), and how many records
there will be (``total``). Three kinds:

- :class:`UniformForecast`: a constant pace near the close (the paper's assumption); built
  from a pace and a total, from an arrival coefficient, or from the current state of a survey.
- :class:`CumulativeForecast`: any expected cumulative arrival curve N(t), piecewise linear
  through given points or a callable.

:class:`ArrivalEstimator` turns the stream of arrival timestamps into a pace that a burst does
not throw off, and from it the expected total at close and the arrival coefficient
``s = (n / pace) / t_ref(n)`` (paper 001, sec. III-B.2).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq


@dataclass(frozen=True)
class UniformForecast:
    """Records arrive at ``pace`` per second until close; ``total`` are expected in all.

    ``head_start(nu) = nu * total / pace``: the last ``nu * total`` records take that long.
    A pace of 0 means no more arrivals: every head start is infinite.
    """

    total: float
    pace: float

    @classmethod
    def from_arrival_coefficient(cls, total: float, arrival_coefficient: float,
                                 t_ref: float) -> UniformForecast:
        """The forecast with ``tau_- = s nu``: all records would take ``s t_ref`` to arrive."""
        if arrival_coefficient <= 0:
            return cls(total=total, pace=math.inf)
        return cls(total=total, pace=total / (arrival_coefficient * t_ref))

    @classmethod
    def from_current(cls, received: int, pace: float, seconds_to_close: float) -> UniformForecast:
        """``received`` records so far, ``pace`` per second from now until close."""
        more = max(pace, 0.0) * max(seconds_to_close, 0.0)
        return cls(total=received + more, pace=max(pace, 0.0))

    def head_start(self, nu: float) -> float:
        if self.pace == 0:  # nothing more arrives: any snapshot already holds every record
            return math.inf
        if nu <= 0:
            return 0.0
        return nu * self.total / self.pace

    def arrival_coefficient(self, t_ref: float) -> float:
        """s = time for all records to arrive at this pace, relative to t_ref."""
        if self.pace == 0:
            return math.inf
        return (self.total / self.pace) / t_ref


@dataclass(frozen=True)
class CumulativeForecast:
    """An expected cumulative arrival curve ``count(t)`` (non-decreasing) up to ``close``.

    Build it from points with :meth:`piecewise` or from any callable. ``head_start(nu)`` is
    ``close - t`` where ``count(t) = (1 - nu) * count(close)``.
    """

    count: Callable[[float], float]
    start: float
    close: float

    @classmethod
    def piecewise(cls, times: Sequence[float], counts: Sequence[float]) -> CumulativeForecast:
        """Linear interpolation through ``(times[i], counts[i])``; the last time is the close."""
        t = np.asarray(times, dtype=float)
        c = np.asarray(counts, dtype=float)
        if t.ndim != 1 or t.shape != c.shape or len(t) < 2:
            raise ValueError("need at least two (time, count) points of equal length")
        if np.any(np.diff(t) <= 0) or np.any(np.diff(c) < 0):
            raise ValueError("times must increase and counts must not decrease")
        return cls(count=lambda x: float(np.interp(x, t, c)), start=float(t[0]),
                   close=float(t[-1]))

    @property
    def total(self) -> float:
        return float(self.count(self.close))

    def head_start(self, nu: float) -> float:
        if nu <= 0:
            return 0.0
        target = (1.0 - nu) * self.total
        if self.count(self.start) >= target:
            return self.close - self.start
        t = brentq(lambda x: self.count(x) - target, self.start, self.close, xtol=1e-9)
        return self.close - t

    def arrival_coefficient(self, t_ref: float, window: float | None = None) -> float:
        """s from the pace over the last ``window`` seconds before close (default: 5 %)."""
        w = window or 0.05 * (self.close - self.start)
        pace = (self.total - self.count(self.close - w)) / w
        if pace <= 0:
            return math.inf
        return (self.total / pace) / t_ref


class ArrivalEstimator:
    """The current arrival pace from a stream of timestamps, robust to bursts.

    Arrivals are counted in bins of ``bin_seconds``; the pace is the median rate over the last
    ``bins`` complete bins, so one invitation burst or one quiet spell moves it little. Until a
    full bin is complete, the pace is the plain average since the first arrival.

    Examples
    --------
    >>> est = ArrivalEstimator(bin_seconds=10, bins=6)
    >>> est.observe(np.arange(0.0, 60.0, 0.5))  # 2 records per second
    >>> est.pace(now=60.0)
    2.0
    >>> est.observe(np.full(500, 61.0))         # a burst
    >>> est.pace(now=70.0)
    2.0
    """

    def __init__(self, bin_seconds: float = 60.0, bins: int = 15) -> None:
        if bin_seconds <= 0 or bins < 1:
            raise ValueError("bin_seconds must be > 0 and bins >= 1")
        self.bin_seconds = float(bin_seconds)
        self.bins = int(bins)
        self.count = 0
        self.first: float | None = None
        self.last: float | None = None
        self._bins: deque[list[float]] = deque()  # [bin start, count], oldest first

    def observe(self, timestamps: Sequence[float] | np.ndarray) -> None:
        """Add arrival times (seconds, any epoch, in any order within a batch)."""
        ts = np.sort(np.asarray(timestamps, dtype=float))
        if ts.size == 0:
            return
        self.count += int(ts.size)
        self.first = float(ts[0]) if self.first is None else min(self.first, float(ts[0]))
        self.last = float(ts[-1]) if self.last is None else max(self.last, float(ts[-1]))
        starts = np.floor(ts / self.bin_seconds) * self.bin_seconds
        values, counts = np.unique(starts, return_counts=True)
        for start, n in zip(values.tolist(), counts.tolist(), strict=True):
            if self._bins and self._bins[-1][0] == start:
                self._bins[-1][1] += n
            elif self._bins and start < self._bins[-1][0]:
                for b in self._bins:  # a late timestamp: add it to its bin if still kept
                    if b[0] == start:
                        b[1] += n
                        break
            else:
                self._bins.append([start, n])
        keep = self.bins + 2
        while len(self._bins) > keep:
            self._bins.popleft()

    def pace(self, now: float) -> float:
        """Records per second: median over the last complete bins (empty bins count as 0)."""
        if self.first is None:
            return 0.0
        current = math.floor(now / self.bin_seconds) * self.bin_seconds
        first_bin = math.floor(self.first / self.bin_seconds) * self.bin_seconds
        complete = round((current - first_bin) / self.bin_seconds)
        if complete < 1:
            span = max(now - self.first, self.bin_seconds)
            return self.count / span
        n = min(self.bins, complete)
        counts = {start: c for start, c in self._bins}
        rates = [counts.get(current - (i + 1) * self.bin_seconds, 0) / self.bin_seconds
                 for i in range(n)]
        return float(np.median(rates))

    def complete_bins(self, now: float) -> int:
        """How many complete bins have passed since the first arrival (0 before any)."""
        if self.first is None:
            return 0
        current = math.floor(now / self.bin_seconds) * self.bin_seconds
        first_bin = math.floor(self.first / self.bin_seconds) * self.bin_seconds
        return max(round((current - first_bin) / self.bin_seconds), 0)

    def expected_total(self, now: float, close: float) -> float:
        """Records expected by ``close`` at the current pace."""
        return self.count + self.pace(now) * max(close - now, 0.0)

    def forecast(self, now: float, close: float) -> UniformForecast:
        return UniformForecast.from_current(self.count, self.pace(now), close - now)

    def arrival_coefficient(self, now: float, close: float,
                            t_ref: Callable[[float], float]) -> float:
        """s = (n / pace) / t_ref(n) with n the expected total at close."""
        n = self.expected_total(now, close)
        pace = self.pace(now)
        if pace <= 0:
            return math.inf
        return (n / pace) / t_ref(n)
