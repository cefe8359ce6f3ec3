import math

import pytest

from streamanon.durations import format_duration, parse_duration


@pytest.mark.parametrize("text,seconds", [
    ("90", 90), ("45s", 45), ("90min", 5400), ("2h", 7200), ("1h30m", 5400),
    ("1.5h", 5400), ("1 h 27.5 min", 5250), ("2 days", 172800), (".5h", 1800),
])
def test_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "2 fortnights", "1h-3m"])
def test_parse_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("seconds,text", [
    (153.3, "153 s"), (9.5, "9.5 s"), (601, "10.0 min"), (3599.999, "1 h"),
    (5250, "1 h 27.5 min"), (math.inf, "unbounded"),
])
def test_format(seconds, text):
    assert format_duration(seconds) == text


def test_a_test_that_measures_a_speed_claim_runs_last():
    from tests.durations import MEASURING, spread

    demo = next(iter(MEASURING))
    ids = ["a", demo, "b", "c", "slow"]
    for seconds in ({"slow": 60.0}, {}):  # with slow tests spread, and without
        order = spread(ids, ids, seconds, workers=2)
        assert order[-1] == demo and sorted(order) == sorted(ids)
