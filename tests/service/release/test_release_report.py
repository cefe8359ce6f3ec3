"""report.json is written once, when the release is published, and says what the store and
``/api/status`` say (issue 14: it used to be written with the files and again after).

The service runs in this process against the embedded broker, its compute pool in a thread,
with the publisher's JSON writer wrapped to count the writes of each file.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import streamanon.service.publisher
from streamanon.service.config import load_config
from streamanon.service.lifecycle import Service
from tests.service.conftest import write_config
from tests.service.kafka_helpers import produce, response
from tests.service.lifecycle_helpers import ThreadComputePool

SURVEY = "wellbeing"
N = 60


def test_report_json_is_written_once_and_is_the_final_report(broker, tmp_path, monkeypatch):
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=5)
    config = load_config(path, env)
    writes: Counter[str] = Counter()
    write_json = streamanon.service.publisher.write_json

    def counting(obj: Any, target: Path, mode: int | None = None) -> None:
        writes[Path(target).name] += 1
        write_json(obj, target, mode)

    monkeypatch.setattr(streamanon.service.publisher, "write_json", counting)

    async def close_and_release() -> tuple[Any, dict]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        try:
            await asyncio.to_thread(produce, broker.bootstrap, config.topic(SURVEY, "responses"),
                                    [(None, response(i)) for i in range(N)])
            deadline = time.monotonic() + 60
            while (await service.status()).surveys[0].stored < N:
                assert time.monotonic() < deadline, "records not stored"
                await asyncio.sleep(0.1)
            await service.close(SURVEY)
            await service.closed(SURVEY, timeout=120)
            return await service.load_release(SURVEY), (await service.status()).to_json()
        finally:
            await service.stop()

    row, status = asyncio.run(close_and_release())
    assert writes["report.json"] == 1
    on_disk = json.loads(Path(row.report["files"]["report"]).read_text())
    assert row.status == "published" and on_disk == row.report
    assert on_disk["n"] == N and on_disk["mode"] == "one-shot"
    assert on_disk["close_to_release_seconds"] == on_disk["released_at"] - on_disk["closed_at"]
    # /api/status shows the stored report's figures, as it always picked them
    shown = status["surveys"][0]["release"]
    assert shown == {"status": "published", **{key: row.report.get(key) for key in (
        "n", "k", "engine", "incremental", "mode", "nu", "n_base", "distortion",
        "information_loss", "close_to_release_seconds", "one_shot_estimate_seconds",
        "predicted_seconds_after_close", "base_seconds", "incremental_seconds",
        "released_at")}}
