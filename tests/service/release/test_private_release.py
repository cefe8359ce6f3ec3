"""``[surveys] epsilon``: the service's differentially private release. The budget is charged
in the store before the release is drawn; a release the budget cannot pay for is refused and
nothing is published; the manifest carries the guarantee, not the loss.

The service runs in this process, its compute pool in a thread."""

from __future__ import annotations

import asyncio
import html
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from streamanon.service.config import ConfigError, load_config
from streamanon.service.lifecycle import Service
from streamanon.service.states import CLOSING
from tests.service.conftest import write_config
from tests.service.kafka_helpers import DROP, produce, read_topic
from tests.service.kafka_helpers import response as plain_response
from tests.service.lifecycle_helpers import ThreadComputePool

SURVEY = "wellbeing"
N = 80
SCHEMA = """
[surveys.schema]
respondent_id = { role = "identifier" }
age = { role = "quasi_identifier", type = "int", min = 16, max = 110 }
income = { role = "quasi_identifier", type = "float", min = 0, max = 100000 }
height = { role = "quasi_identifier", type = "float", min = 100, max = 220 }
satisfaction = { role = "confidential", type = "int", min = 1, max = 5 }
ticket = { role = "confidential", type = "int", min = 0, max = 1000 }
smoker = { role = "confidential", type = "bool", required = false }
visits = { role = "confidential", type = "int", min = 0, max = 20, required = false }
comment = { role = "ignore", type = "str", required = false }
"""


def response(i: int) -> bytes:
    """A response with the nullable answers: a bool and an int each missing now and then."""
    return plain_response(i, smoker=DROP if i % 7 == 0 else i % 3 == 0,
                          visits=DROP if i % 5 == 0 else i % 21)


def private_config(tmp_path: Path, bootstrap: str, extra: str) -> tuple[Path, dict[str, str]]:
    path, env = write_config(tmp_path, bootstrap, survey=SURVEY, k=5, schema=SCHEMA)
    text = path.read_text().replace('incremental = "nn_split_end"\n',
                                    'incremental = "nn_split_end"\n' + extra + "\n", 1)
    path.write_text(text)
    return path, env


def charge(store: Path, epsilon: float) -> None:
    """What a release drawn and lost in a crash leaves in the store: its spending."""
    with sqlite3.connect(store) as db:
        db.execute("INSERT INTO privacy_spent (survey, release_id, epsilon, at) "
                   "VALUES (?, ?, ?, ?)", (SURVEY, "lost-in-a-crash", epsilon, time.time()))


def close_and_release(config: Any, bootstrap: str, before_close: Any = None) -> tuple[Any, Any]:
    async def run() -> tuple[Any, Any]:
        service = Service(config, compute_pool=ThreadComputePool())
        await service.start()
        try:
            await asyncio.to_thread(produce, bootstrap, config.topic(SURVEY, "responses"),
                                    [(None, response(i)) for i in range(N)])
            deadline = time.monotonic() + 60
            while (await service.status()).surveys[0].stored < N:
                assert time.monotonic() < deadline, "records not stored"
                await asyncio.sleep(0.1)
            if before_close is not None:
                before_close()
            await service.close(SURVEY)
            deadline = time.monotonic() + 120
            while True:  # released, or the close failed
                survey = (await service.status()).to_json()["surveys"][0]
                if survey["state"] == "RELEASED" or survey.get("error"):
                    break
                assert time.monotonic() < deadline, "neither released nor failed"
                await asyncio.sleep(0.2)
            return await service.load_release(SURVEY), survey
        finally:
            await service.stop()

    return asyncio.run(run())


def test_a_private_release_records_its_budget_and_its_manifest_carries_the_guarantee(
        broker, tmp_path):
    path, env = private_config(tmp_path, broker.bootstrap, "epsilon = 2.0")
    config = load_config(path, env)
    row, survey = close_and_release(config, broker.bootstrap)
    assert survey["state"] == "RELEASED" and row.status == "published"
    got = row.report["differential_privacy"]
    assert got["differentially_private"] is True and got["epsilon"] == 2.0
    assert got["budget"] == {"spent": 2.0, "total": 2.0, "this_release": 2.0}
    assert set(got["attributes"]) == {"age", "income", "height", "satisfaction", "ticket",
                                      "smoker", "visits"}
    assert row.report["distortion"] is None and row.report["engine"] == "dp_insensitive"
    assert row.report["risk"]["utility"] and Path(row.report["files"]["html"]).exists()
    page = Path(row.report["files"]["html"]).read_text()
    assert html.escape(got["guarantee"][1:]) in page and "dp_insensitive" in page
    on_disk = json.loads(Path(row.report["files"]["report"]).read_text())
    assert on_disk["differential_privacy"] == got
    table = pd.read_parquet(row.report["files"]["parquet"])
    assert len(table) == N and table["age"].between(16, 110).all()
    assert str(table["smoker"].dtype) == "boolean" and str(table["visits"].dtype) == "Int64"
    assert table.value_counts(["age", "income", "height"]).min() >= 5  # k-anonymous as well
    store = Path(config.store.url.removeprefix("sqlite:///"))
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT epsilon FROM privacy_spent WHERE survey = ?",
                          (SURVEY,)).fetchall() == [(2.0,)]
    messages = read_topic(broker.bootstrap, config.topic(SURVEY, "release"), expected=N + 1)
    manifest = json.loads(messages[-1].value)
    assert not {"distortion", "information_loss", "rejected"} & set(manifest)
    assert manifest["differential_privacy"] == {key: got[key] for key in (
        "epsilon", "mechanism", "scope", "differentially_private", "guarantee")}


@pytest.mark.parametrize("budget, released", [(None, False), (2.0, True)])
def test_a_release_the_budget_cannot_pay_for_is_refused_and_nothing_is_published(
        broker, tmp_path, budget, released):
    extra = "epsilon = 1.0" + ("" if budget is None else f"\nepsilon_budget = {budget}")
    path, env = private_config(tmp_path, broker.bootstrap, extra)
    config = load_config(path, env)
    store = Path(config.store.url.removeprefix("sqlite:///"))
    row, survey = close_and_release(config, broker.bootstrap, lambda: charge(store, 1.0))
    if released:
        assert survey["state"] == "RELEASED"
        assert row.report["differential_privacy"]["budget"]["spent"] == 2.0
        return
    assert survey["state"] == CLOSING and row is None
    assert "privacy budget of 1" in survey["error"] and "epsilon_budget" in survey["error"]
    with sqlite3.connect(store) as db:  # the refused release spent nothing
        assert db.execute("SELECT SUM(epsilon) FROM privacy_spent").fetchone() == (1.0,)
    assert not (Path(config.output.directory) / SURVEY).exists()


@pytest.mark.parametrize("extra, message", [
    ("epsilon = 1.0\nl = 2", "epsilon with l, t or strata"),
    ("epsilon = 1.0\nepsilon_budget = 0.5", "less than one release's epsilon"),
    ("epsilon_budget = 3.0", "epsilon_budget without epsilon"),
    ("epsilon = inf", "finite number"),
])
def test_settings_a_private_release_cannot_honour_are_refused_at_start(tmp_path, extra,
                                                                      message):
    path, env = private_config(tmp_path, "127.0.0.1:9", extra)
    with pytest.raises(ConfigError, match=message):
        load_config(path, env)


def test_a_survey_without_declared_bounds_is_refused_at_start(tmp_path):
    path, env = private_config(tmp_path, "127.0.0.1:9", "epsilon = 1.0")
    path.write_text(path.read_text().replace("min = 100, max = 220", "min = 100"))
    with pytest.raises(ConfigError, match="height declares no max"):
        load_config(path, env)
