"""Arrival profiles (scheduler/profiles.py): shapes, determinism, the expected curve, files."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from scheduler.profiles import PROFILES, from_file, get_profile, resolve

DURATION = 10 * 3600.0
N = 20_000


def _ks(times: np.ndarray, cumulative, duration: float) -> float:
    """Kolmogorov-Smirnov distance between the sample and the expected curve."""
    n = len(times)
    expected = cumulative(times / duration)
    above = np.arange(1, n + 1) / n - expected
    below = expected - np.arange(n) / n
    return float(max(above.max(), below.max()))


@pytest.mark.parametrize("name", list(PROFILES))
def test_times_are_n_sorted_moments_within_the_survey(name):
    times = resolve(name, DURATION).times(N, DURATION, seed=3)
    assert times.shape == (N,)
    assert np.all(np.diff(times) >= 0)
    assert times.min() >= 0 and times.max() <= DURATION


@pytest.mark.parametrize("name", list(PROFILES))
def test_times_are_deterministic_per_seed(name):
    profile = resolve(name, DURATION)
    np.testing.assert_array_equal(profile.times(1000, DURATION, seed=7),
                                  profile.times(1000, DURATION, seed=7))
    if name != "uniform":  # evenly spaced: no randomness at all
        assert not np.array_equal(profile.times(1000, DURATION, seed=7),
                                  profile.times(1000, DURATION, seed=8))


@pytest.mark.parametrize("name", list(PROFILES))
def test_empirical_cdf_matches_the_expected_curve(name):
    profile = resolve(name, DURATION)
    times = profile.times(N, DURATION, seed=11)
    # 1.63 / sqrt(n) is the 99 % KS critical value; uniform is exact up to half a record
    assert _ks(times, profile.cumulative, DURATION) < 1.63 / np.sqrt(N)


def test_cumulative_runs_from_zero_to_one_and_never_decreases():
    u = np.linspace(0, 1, 1001)
    for name in PROFILES:
        c = resolve(name, DURATION).cumulative(u)
        assert c[0] == pytest.approx(0.0, abs=1e-12)
        assert c[-1] == pytest.approx(1.0)
        assert np.all(np.diff(c) >= -1e-15)


def test_front_loaded_arrives_early_and_back_loaded_late():
    front = resolve("front_loaded", DURATION).times(N, DURATION, seed=1)
    back = resolve("back_loaded", DURATION).times(N, DURATION, seed=1)
    assert np.median(front) < 0.3 * DURATION
    assert np.median(back) > 0.7 * DURATION


def test_uniform_is_evenly_spaced():
    times = resolve("uniform", DURATION).times(N, DURATION)
    gaps = np.diff(times)
    np.testing.assert_allclose(gaps, DURATION / N, rtol=1e-9)
    assert times[0] == pytest.approx(DURATION / N / 2)


def test_poisson_gaps_have_a_coefficient_of_variation_near_one():
    gaps = np.diff(resolve("poisson", DURATION).times(N, DURATION, seed=5))
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)
    assert gaps.mean() == pytest.approx(DURATION / N, rel=0.02)


def test_reminders_bring_bursts_right_after_one_third_and_two_thirds():
    times = resolve("reminders", DURATION).times(N, DURATION, seed=2)
    u = times / DURATION
    width = 0.02  # the bursts decay with a time constant of 0.04
    for at in (1 / 3, 2 / 3):
        before = np.count_nonzero((u >= at - width) & (u < at))
        after = np.count_nonzero((u >= at) & (u < at + width))
        assert after > 2 * before, (at, before, after)  # expected ratio about 3


def test_diurnal_over_48_hours_has_night_troughs():
    duration = 48 * 3600.0
    times = resolve("diurnal", duration).times(N, duration, seed=4)
    per_hour = np.bincount((times // 3600).astype(int), minlength=48)[:48]
    night = [per_hour[h % 48] for h in (0, 1, 23, 24, 25, 47)]
    noon = [per_hour[h] for h in (11, 12, 35, 36)]
    assert max(night) < 0.3 * min(noon)
    # two troughs, one per night: the quietest hour of each day is near midnight
    for day in (0, 1):
        quietest = int(np.argmin(per_hour[24 * day: 24 * day + 24]))
        assert min(quietest, 24 - quietest) <= 2


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_from_file_round_trips_seconds_and_iso_timestamps(tmp_path):
    stamps = resolve("front_loaded", DURATION).times(2000, DURATION, seed=9)
    epoch = 1_700_000_000.0
    seconds = _write(tmp_path / "seconds.csv",
                     ["submitted_at,answer"] + [f"{epoch + t:.6f},x" for t in stamps])
    opened = datetime(2024, 3, 1, 8, 0, tzinfo=timezone.utc)
    iso = _write(tmp_path / "iso.csv",
                 ["timestamp"] + [(opened + timedelta(seconds=float(t))).isoformat()
                                  .replace("+00:00", "Z") for t in stamps])
    share = (stamps - stamps[0]) / (stamps[-1] - stamps[0])
    for path in (seconds, iso):
        profile = from_file(path)
        assert profile.name == f"file:{path.name}"
        # the file's empirical curve comes back
        assert _ks(share[1:-1], profile.cumulative, 1.0) < 0.01
        resampled = profile.times(20_000, DURATION, seed=0)
        assert _ks(resampled, lambda u, s=share: np.searchsorted(s, u, "right") / len(s),
                   DURATION) < 0.02
    u = np.linspace(0, 1, 257)
    np.testing.assert_allclose(from_file(seconds).cumulative(u), from_file(iso).cumulative(u),
                               atol=1e-6)
    assert resolve(str(seconds), DURATION).name == f"file:{seconds.name}"


@pytest.mark.parametrize(("lines", "message"), [
    (["timestamp", "10", "oops", "30"], r"bad\.csv:3: not a timestamp: 'oops'"),
    (["timestamp", "12.5"], "need at least two timestamps, found 1"),
    ([], "need at least two timestamps, found 0"),
    (["5", "5", "5"], "all timestamps are equal"),
])
def test_from_file_rejects_bad_files_with_a_clear_message(tmp_path, lines, message):
    path = _write(tmp_path / "bad.csv", lines)
    with pytest.raises(ValueError, match=message):
        from_file(path)


def test_unknown_profile_names_list_the_available_ones():
    for lookup in (lambda: get_profile("weekly"), lambda: resolve("weekly", DURATION)):
        with pytest.raises(ValueError, match="unknown arrival profile 'weekly'") as info:
            lookup()
        for name in PROFILES:
            assert name in str(info.value)


@pytest.mark.parametrize(("n", "duration"), [(0, DURATION), (10, 0.0), (10, float("inf"))])
def test_times_rejects_bad_sizes_and_durations(n, duration):
    with pytest.raises(ValueError):
        PROFILES["uniform"].times(n, duration)
