"""``engine = "auto"``: the planner chooses the base engine from the candidates' cost models
(issue 18, point 3), the base run uses it, the release report says so, and a restart keeps
the engine the stored base run used whatever the cost models say by then.

The service runs in this process against the embedded broker, its compute pool in a thread;
the cost models are written beforehand, so the choice is the planner's, not the machine's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import streamanon.service.base_run
from streamanon.service.config import ConfigError, load_config
from streamanon.service.lifecycle import Service
from streamanon.service.releasing import release_run
from tests.service.conftest import write_config
from tests.service.kafka_helpers import produce, response
from tests.service.lifecycle_helpers import (
    ThreadComputePool,
    collect,
    put_model,
    release,
    run_base,
    until,
)
from tests.service.restart_helpers import evict_group

SURVEY = "wellbeing"
M, K = 3, 5


def _models(path: Path, ona_seconds_at_2000: float) -> None:
    """MDAV at 1 ms per 1,000 records, ONA* at the given seconds for 2,000 (quadratic)."""
    for engine, t2000 in (("mdav", 0.002), ("ona_star", ona_seconds_at_2000)):
        put_model(path, engine, M, K, [(1000, t2000 / 4), (2000, t2000)])


def _config(tmp_path: Path, bootstrap: str, models: Path, extra_survey: str = "") -> Any:
    path, env = write_config(tmp_path, bootstrap, survey=SURVEY, k=K, engine="auto",
                             extra=f'cost_models = "{models}"')
    path.write_text(path.read_text().replace('engine = "auto"',
                                             f'engine = "auto"\n{extra_survey}'))
    return load_config(path, env)


async def _collect_and_base(service: Service, bootstrap: str, config: Any, n: int,
                            failing_first: Any = None) -> None:
    """Send ``n`` responses, then start the base run on them as the planner's trigger does;
    with ``failing_first(check)``, a first base run fails and ``check()`` runs after it."""
    plan = await collect(service, bootstrap, config, SURVEY, n)
    if failing_first is not None:
        with failing_first():
            assert await service.start_base(SURVEY, plan)

            async def failed() -> bool:
                return bool((await service.status()).surveys[0].error)

            await until(failed, "the failing base run did not fail")
        await until(lambda: asyncio.sleep(0, service.surveys[SURVEY].base_task is None),
                    "the failed base run is still running")
        assert service.surveys[SURVEY].engine == "auto"  # chosen again next time
        assert service.surveys[SURVEY].engine_choice is None
    await run_base(service, SURVEY, plan)


async def _release(service: Service) -> dict:
    return await release(service, SURVEY)


def test_mdav_is_chosen_when_onas_base_run_would_not_fit(broker, tmp_path, monkeypatch):
    chosen = "mdav"
    models = tmp_path / "cost_models.json"
    _models(models, 4.0e5)
    config = _config(tmp_path, broker.bootstrap, models)

    @contextlib.contextmanager
    def failing_base() -> Iterator[None]:
        def broken(*args: Any) -> Any:
            raise RuntimeError("the compute process died")

        with monkeypatch.context() as patch:
            patch.setattr(streamanon.service.base_run, "kept_base_partition", broken)
            yield

    async def run() -> tuple[dict, dict, dict]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        try:
            await _collect_and_base(service, broker.bootstrap, config, 60, failing_base)
            plan = (await service.status()).to_json()["surveys"][0]["plan"]
            cp = await asyncio.to_thread(service.store.load_checkpoint, SURVEY)
            produce(broker.bootstrap, config.topic(SURVEY, "responses"),
                    [(None, response(i)) for i in range(60, 80)])
            status = (await service.status()).to_json()["surveys"][0]
            report = await _release(service)
            return plan, {"checkpoint": cp.engine, **status}, report
        finally:
            await service.stop()

    plan, status, report = asyncio.run(run())
    # the plans go on naming the chosen engine and its expected IL once it is chosen
    assert plan is not None and plan["engine"] == chosen
    assert plan["expected_delta"] is not None and plan["choice"]
    assert status["checkpoint"] == chosen and status["engine"] == chosen
    assert report["engine"] == chosen and report["mode"] == "two-stage"
    assert report["engine_choice"]["configured"] == "auto"
    assert report["engine_choice"]["chosen"] == chosen
    assert "ona_star" in report["engine_choice"]["reason"]
    assert "does not fit" in report["engine_choice"]["reason"]
    # the risk page names the engine that ran, not the configuration's "auto"
    page = Path(report["files"]["html"]).read_text()
    assert f"<tr><th>engine</th><td>{chosen}</td></tr>" in page


def test_a_restart_keeps_the_engine_of_the_stored_base_run(broker, tmp_path):
    models = tmp_path / "cost_models.json"
    _models(models, 0.002)  # ONA* fits: chosen for the base run
    config = _config(tmp_path, broker.bootstrap, models)

    async def base_then_stop() -> tuple[dict, str, dict | None]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        try:
            await _collect_and_base(service, broker.bootstrap, config, 60)
            cp = await asyncio.to_thread(service.store.load_checkpoint, SURVEY)
            plan = (await service.status()).to_json()["surveys"][0]["plan"]
            return plan, cp.engine, service.surveys[SURVEY].engine_choice
        finally:
            await service.stop()

    async def restart() -> tuple[str, dict | None, str]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()  # (the release path with a chosen engine: the test above)
        try:
            survey = service.surveys[SURVEY]
            return (survey.engine, survey.engine_choice,
                    release_run(survey.config, engine=survey.engine, stage=survey.stage).engine)
        finally:
            await service.stop()

    plan, engine, choice = asyncio.run(base_then_stop())
    # the embedded broker numbers a group's first generation 0, and aiokafka leaves a group
    # on stop only from generation 1 on: without this the restart waits for a rebalance
    evict_group(broker.bootstrap, config.kafka.group_id)
    assert engine == "ona_star" and plan["engine"] == "ona_star"
    assert plan["expected_delta"] < 0 and "mdav" in plan["choice"]  # less loss than MDAV
    assert choice["chosen"] == "ona_star" and choice["expected_delta"] < 0
    _models(models, 4.0e5)  # now the planner would choose MDAV: the base run was ONA*'s
    engine, choice, released_with = asyncio.run(restart())
    assert engine == released_with == "ona_star"
    assert choice["chosen"] == "ona_star"
    assert choice["reason"] == "the engine of the stored base run"


def test_auto_takes_no_engine_parameters(broker, tmp_path):
    models = tmp_path / "cost_models.json"
    with pytest.raises(ConfigError, match=r'engine_params: engine "auto" takes no parameters'):
        _config(tmp_path, broker.bootstrap, models, extra_survey="engine_params = { rounds = 2 }")
