"""The Kafka clients' errors are rate-limited in the log (issue 31, point 3): a 20 s broker
outage wrote 1,250 ERROR lines, one per librdkafka retry. Now an outage writes its first
line, one a minute while it lasts with the count held back, and the count of the last outage
with the first line of the next; other loggers pass untouched."""

from __future__ import annotations

import logging

from streamanon.service.logs import ClientErrors


def record(name: str, at: float, level: int = logging.ERROR, msg: str = "Connection failed"):
    r = logging.LogRecord(name, level, __file__, 1, msg, (), None)
    r.created = at
    return r


def passed(limiter: ClientErrors, records) -> list[logging.LogRecord]:
    return [r for r in records if limiter.filter(r)]


def test_an_outage_is_one_line_then_one_a_minute_with_the_count():
    limiter = ClientErrors(quiet=30.0, repeat=60.0)
    # 20 s of a dead broker: 1,250 errors from three clients
    names = ("streamanon.service.kafka_clients.librdkafka", "aiokafka.conn",
             "streamanon.service.publisher.librdkafka")
    outage = [record(names[i % 3], 1000.0 + i * 0.016) for i in range(1250)]
    logged = passed(limiter, outage)
    assert len(logged) == 1 and logged[0].getMessage() == "Connection failed"
    # a long outage: one line a minute, saying how many were held back
    long = [record("aiokafka.conn", 1020.0 + i) for i in range(1, 130)]
    logged = passed(limiter, long)
    assert len(logged) == 2
    assert "more Kafka client warning(s) and error(s) in this outage" in logged[0].getMessage()
    # the next outage, after a quiet minute: its first line carries the last one's count
    later = passed(limiter, [record("aiokafka.conn", 1300.0)])
    assert len(later) == 1 and "in the last outage" in later[0].getMessage()


def test_other_loggers_and_lower_levels_pass():
    limiter = ClientErrors()
    own = [record("streamanon.service.collector", 1000.0 + i * 0.01) for i in range(50)]
    assert len(passed(limiter, own)) == 50
    info = [record("aiokafka.conn", 1000.0 + i * 0.01, logging.INFO) for i in range(50)]
    assert len(passed(limiter, info)) == 50


def test_setup_logging_installs_it(tmp_path):
    from streamanon.service.logs import setup_logging

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("info")
        assert any(isinstance(f, ClientErrors) for h in root.handlers for f in h.filters)
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
