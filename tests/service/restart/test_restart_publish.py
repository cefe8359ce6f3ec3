"""A publish cut off by SIGKILL (issue 13, finding 2) resumes from the written release files:
the same records in the same order, then the manifest, never computed again; consumers take
the complete run by its manifest, and the survey is released once."""

from __future__ import annotations

import hashlib

import pandas as pd

from streamanon.service.publisher import record_messages
from tests.service.kafka_helpers import produce
from tests.service.restart_helpers import (
    complete_run,
    high_watermark,
    read_all,
    response,
    restartable,  # noqa: F401 (fixture)
    runs,
)

N = 3000
#: The service's producers' rate while the test cuts the publish. The brokers average a rate
#: over their quota window (ten seconds or more), so the first megabyte or two go through at once
#: and the rest of the 9 MB at 100 kB/s: the kill finds the publish in its middle however the
#: test's steps are scheduled. Unthrottled, Apache Kafka took the whole release within one step
#: that a busy machine stretched (a CI run; reproduced here with 0.3 s steps).
THROTTLE = 100_000


def test_a_publish_cut_by_a_kill_resumes_from_the_written_files(restartable, broker,  # noqa: F811
                                                                tmp_path):
    svc = restartable()
    client_id = f"{svc.prefix}-service"
    svc.config.write_text(svc.config.read_text().replace(
        "[kafka]\n", f'[kafka]\nclient_id = "{client_id}"\n', 1))
    broker.limit_produce(client_id, THROTTLE)
    svc.start()
    produce(svc.bootstrap, f"{svc.prefix}.s.responses",
            [(None, response(i, essay_bytes=3000)) for i in range(N)])
    svc.wait_for("s", lambda s: s["stored"] == N, what="ingest")
    release_topic = f"{svc.prefix}.s.release"
    code, _ = svc.post("/api/surveys/s/close")
    assert code == 202
    svc.wait_line(r"-> CLOSING")
    svc.step_until(lambda: high_watermark(svc.bootstrap, release_topic) > 0)
    svc.kill()  # the first records are on the topic, the manifest is not
    broker.limit_produce(client_id, None)

    release_id, status = svc.release_row()
    assert status == "written"
    cut = high_watermark(svc.bootstrap, release_topic)
    assert 0 < cut < N, f"not a cut publish: {cut} of {N} records were on the topic"
    parquet = tmp_path / "releases" / "s" / "release.parquet"
    written = (parquet.stat().st_ino, hashlib.sha256(parquet.read_bytes()).hexdigest())

    svc.evict()
    svc.start()
    status = svc.wait_for("s", lambda s: s["state"] == "RELEASED", timeout=60, what="release")
    assert status["error"] is None
    assert svc.release_row() == (release_id, "published")
    assert "publishing its files again" in svc.lines()
    assert "computing the release" not in svc.lines()  # nothing computed after the restart
    assert (parquet.stat().st_ino, hashlib.sha256(parquet.read_bytes()).hexdigest()) == written

    [run] = runs(read_all(svc.bootstrap, release_topic))  # one manifest
    assert run["manifest"]["release_id"] == release_id and run["manifest"]["count"] == N
    sent = complete_run(run)
    assert sent == record_messages(pd.read_parquet(parquet))  # the file, row by row, in order
    before = [value for _, value in run["records"][:-N]]  # the cut run: a prefix of the same
    assert 0 < len(before) < N and before == sent[:len(before)]
