from __future__ import annotations

import math

import numpy as np
import pytest

from scheduler.arrivals import ArrivalEstimator, CumulativeForecast, UniformForecast


def test_uniform_pace_is_recovered():
    est = ArrivalEstimator(bin_seconds=60, bins=10)
    est.observe(np.sort(np.random.default_rng(0).uniform(0, 3600, 7200)))  # 2 per second
    assert est.pace(now=3600) == pytest.approx(2.0, rel=0.1)


def test_pace_is_robust_to_a_burst():
    est = ArrivalEstimator(bin_seconds=60, bins=10)
    est.observe(np.arange(0, 1200, 1.0))  # 1 per second
    est.observe(np.full(5000, 1190.0))  # an invitation burst in one bin
    assert est.pace(now=1200) == pytest.approx(1.0, rel=0.02)


def test_windowed_pace_follows_a_change_of_pace():
    est = ArrivalEstimator(bin_seconds=60, bins=5)
    est.observe(np.arange(0, 3000, 0.5))  # 2/s
    est.observe(np.arange(3000, 6000, 2.0))  # then 0.5/s
    assert est.pace(now=6000) == pytest.approx(0.5, rel=0.05)


def test_silence_brings_the_pace_to_zero():
    est = ArrivalEstimator(bin_seconds=60, bins=5)
    est.observe(np.arange(0, 600, 1.0))
    assert est.pace(now=600 + 10 * 60) == 0.0


def test_before_a_full_bin_the_pace_is_the_plain_average():
    est = ArrivalEstimator(bin_seconds=600, bins=5)
    est.observe(np.arange(0, 100, 0.5))
    assert est.pace(now=100) == pytest.approx(200 / 600)  # at least one bin of span


def test_no_arrivals_no_pace():
    assert ArrivalEstimator().pace(now=10) == 0.0


def test_expected_total_and_arrival_coefficient():
    est = ArrivalEstimator(bin_seconds=60, bins=10)
    est.observe(np.arange(0, 3600, 1.0))  # 1/s for an hour
    total = est.expected_total(now=3600, close=36000)
    assert total == pytest.approx(36000, rel=0.01)
    # t_ref = 2 h for that n: s = (n / pace) / t_ref = 36000 s / 7200 s = 5
    s = est.arrival_coefficient(now=3600, close=36000, t_ref=lambda n: 7200.0)
    assert s == pytest.approx(5.0, rel=0.01)
    forecast = est.forecast(now=3600, close=36000)
    assert forecast.head_start(0.1) == pytest.approx(3600, rel=0.01)


def test_late_timestamps_are_counted():
    est = ArrivalEstimator(bin_seconds=60, bins=10)
    est.observe(np.arange(0, 600, 1.0))
    est.observe([30.0, 31.0])
    assert est.count == 602


def test_uniform_forecast_from_arrival_coefficient():
    f = UniformForecast.from_arrival_coefficient(total=1000, arrival_coefficient=5, t_ref=7200)
    assert f.head_start(0.1) == pytest.approx(0.1 * 5 * 7200)
    assert f.arrival_coefficient(7200) == pytest.approx(5)
    assert UniformForecast.from_arrival_coefficient(1000, 0, 7200).head_start(0.5) == 0


def test_zero_pace_forecast_has_unbounded_head_start():
    f = UniformForecast.from_current(received=100, pace=0.0, seconds_to_close=600)
    assert f.total == 100 and math.isinf(f.head_start(0.0))
    assert math.isinf(f.arrival_coefficient(10.0))


def test_cumulative_forecast_rejects_bad_curves():
    with pytest.raises(ValueError):
        CumulativeForecast.piecewise([0, 10, 5], [0, 1, 2])
    with pytest.raises(ValueError):
        CumulativeForecast.piecewise([0, 10], [5, 1])


def test_cumulative_forecast_plateau_gives_the_earliest_snapshot():
    """No arrivals in the last hour: the base snapshot can be an hour before close."""
    f = CumulativeForecast.piecewise([0, 3600, 7200], [0, 1000, 1000])
    assert f.head_start(0.0 + 1e-12) == pytest.approx(3600, abs=1e-3)
    assert f.head_start(0.5) == pytest.approx(3600 + 1800, abs=1e-3)
