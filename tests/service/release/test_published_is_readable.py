""""Published" means on the topic (issue 31, point 2): with the broker replaced by an empty one
mid-ingest, the service logged "RELEASED (60000 records published)" while the broker had no
release topic at all. Now the release topic is made sure of before each publish (created when
it is missing), and a publish counts only once the topic ends in the release's manifest: a
broker that acknowledges and does not keep the messages gets the release again.

The service runs in this process against the embedded broker; the release producer is wrapped
so that its first publish is acknowledged and lost, as on a broker that lost its topics.
"""

from __future__ import annotations

import asyncio
import json

from streamanon.service.config import load_config
from streamanon.service.lifecycle import Service
from streamanon.service.states import RELEASED
from tests.service.conftest import write_config
from tests.service.kafka_helpers import (
    delete_topic,
    read_topic,
    release_kind,
    release_meta,
    topic_names,
)
from tests.service.lifecycle_helpers import ThreadComputePool, collect, put_model, release

SURVEY = "wellbeing"
N = 300


def configured(broker, tmp_path):
    """The survey's configuration on the embedded broker (MDAV's model stored), and its
    release topic."""
    models = tmp_path / "cost_models.json"
    put_model(models, "mdav", 3, 5, [(1000, 0.01), (2000, 0.04)])
    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY, k=5, engine="mdav",
                             extra=f'cost_models = "{models}"')
    config = load_config(path, env)
    return config, config.topic(SURVEY, "release")


class FirstPublish:
    """The release producer ``real`` with its first publish done by
    ``first(real, topic, messages, manifest)`` instead."""

    def __init__(self, real, first):
        self.real, self.first, self.done = real, first, False

    def publish(self, topic, messages, manifest):
        if not self.done:
            self.done = True
            self.first(self.real, topic, messages, manifest)
            return
        self.real.publish(topic, messages, manifest)

    def close(self):
        self.real.close()


def test_a_lost_publish_is_sent_again_and_a_missing_topic_is_created(broker, tmp_path, caplog):
    config, topic = configured(broker, tmp_path)

    async def run() -> tuple[dict, str, list[int], str]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        lost: list[int] = []
        try:
            # acknowledged, and nothing of it kept
            service._releaser.producer = FirstPublish(
                service.release_producer,
                lambda real, topic, messages, manifest: lost.append(len(messages)))
            await collect(service, broker.bootstrap, config, SURVEY, N)
            delete_topic(broker.bootstrap, topic)  # the broker lost it (an empty one now)
            report = await release(service, SURVEY)
            state = (await service.survey_state(SURVEY)).state
            metrics = service.telemetry.exposition([]).decode()
        finally:
            await service.stop()
        return report, state, lost, metrics

    report, state, lost, metrics = asyncio.run(run())
    assert lost == [report["n"]] and state == RELEASED
    # the failed attempt is counted where an operator's alert can see it
    assert f'streamanon_publish_failures_total{{survey="{SURVEY}"}} 1.0' in metrics
    got = read_topic(broker.bootstrap, topic, expected=report["n"] + 1)
    assert len(got) == report["n"] + 1  # every record once, then the manifest
    assert release_kind(got[-1]) == "manifest"
    assert json.loads(got[-1].value)["count"] == report["n"]
    assert "does not end in" in caplog.text  # the lost publish was noticed and said


def test_a_publish_missing_its_first_records_is_sent_again(broker, tmp_path, caplog):
    """The fault suite (simulations/faults.py, scenario e) SIGKILLed the broker mid-publish and
    started an empty one: the records acknowledged by the old broker were gone, the rest and the
    manifest reached the new one, and the release was taken as published, its manifest counting
    more records than preceded it. A publish counts only when the manifest's run is whole."""
    config, topic = configured(broker, tmp_path)

    async def run() -> tuple[dict, str]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        try:
            # its first 10 records were kept by a broker since replaced, so the topic has
            # the rest and the manifest
            service._releaser.producer = FirstPublish(
                service.release_producer,
                lambda real, topic, messages, manifest: real.publish(topic, messages[10:],
                                                                     manifest))
            await collect(service, broker.bootstrap, config, SURVEY, N)
            report = await release(service, SURVEY)
            state = (await service.survey_state(SURVEY)).state
        finally:
            await service.stop()
        return report, state

    report, state = asyncio.run(run())
    assert state == RELEASED
    n = report["n"]
    got = read_topic(broker.bootstrap, topic, expected=(n - 10 + 1) + (n + 1))
    assert len(got) == 2 * n - 8  # the cut run and its manifest, then the whole release
    last = got[-(n + 1):]
    assert release_kind(last[-1]) == "manifest"
    assert [release_meta(r).index for r in last[:-1]] == list(range(n))
    assert "does not end in" in caplog.text or "incomplete" in caplog.text


def test_reading_a_missing_release_topic_leaves_it_missing(broker, tmp_path):
    """The fault suite (scenario e) found the release topic re-created with the broker's
    default 4 partitions: the read that checks a resumed publish asked for the topic's
    metadata with auto-creation allowed, before the service made it with one partition."""
    from streamanon.service.offsets import messages_before_end

    path, env = write_config(tmp_path, broker.bootstrap, survey=SURVEY)
    config = load_config(path, env)
    topic = f"{config.kafka.topic_prefix}.absent.release"
    assert messages_before_end(config, topic, [1]) == (0, {})
    assert topic not in topic_names(broker.bootstrap)
