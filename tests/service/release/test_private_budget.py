"""Which private releases the service charges to the survey's budget: a differentially
private one spends its epsilon in the store; one that is not (``individual_ranking``, or the
``quasi_identifiers`` scope) spends nothing, and its report says that no budget applies.

``write_private`` is called directly, with a releaser on the survey's store and output settings
(its store calls made in place): no broker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from streamanon.service.config import parse_config
from streamanon.service.private_release import write_private
from streamanon.service.publisher import records_frame
from streamanon.service.releasing import Releaser
from streamanon.service.store import Records, SQLiteStore

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
N = 60


def survey_config(tmp_path: Path, **dp: Any) -> Any:
    survey = {"id": "s1", "k": 5, "close": "on-command", "epsilon": 1.0, **dp, "schema": {
        "rid": {"role": "identifier"},
        "age": {"role": "quasi_identifier", "type": "int", "min": 16, "max": 90},
        "height": {"role": "quasi_identifier", "type": "float", "min": 100, "max": 220},
        "answer": {"role": "confidential", "type": "int", "min": 0, "max": 10}}}
    return parse_config({"surveys": [survey], "output": {"directory": str(tmp_path / "out")},
                         "store": {"url": f"sqlite:///{tmp_path / 'store.db'}"}}, ENV)


def release_with(tmp_path: Path, **dp: Any) -> tuple[dict[str, Any], float]:
    """Draw and write the survey's release; its report's guarantee and what the store has
    charged the survey."""
    config = survey_config(tmp_path, **dp)
    sc = config.surveys[0]
    rng = np.random.default_rng(7)
    qi = np.column_stack([rng.integers(16, 91, N), rng.uniform(100, 220, N)]).astype(float)
    records = Records(seq=np.arange(1, N + 1), arrived_at=np.arange(N, dtype=float), qi=qi,
                      confidential=[{"answer": int(v)} for v in rng.integers(0, 11, N)],
                      labels=[None] * N)
    store = SQLiteStore(tmp_path / "store.db")
    store.ensure_survey(sc.id)

    async def in_store(fn: Any, *args: Any) -> Any:
        return fn(*args)

    releaser = Releaser(config, store, in_store, compute_pool=None, producer=None,
                        telemetry=None)
    survey = SimpleNamespace(config=sc, record=lambda *_: None,
                         ingest=SimpleNamespace(rejected={}))
    try:
        row, *_ = asyncio.run(write_private(releaser, survey, records_frame(records, sc), 0))
        return row.report["differential_privacy"], store.privacy_spent(sc.id)
    finally:
        store.close()


def test_a_differentially_private_release_spends_its_epsilon(tmp_path):
    got, spent = release_with(tmp_path, epsilon_budget=3.0)
    assert got["differentially_private"] is True and spent == 1.0
    assert got["budget"] == {"spent": 1.0, "total": 3.0, "this_release": 1.0}


@pytest.mark.parametrize("dp", [{"dp_mechanism": "individual_ranking"},
                                {"dp_scope": "quasi_identifiers"}])
def test_a_release_that_is_not_differentially_private_spends_nothing(tmp_path, dp):
    got, spent = release_with(tmp_path, **dp)
    assert got["differentially_private"] is False and spent == 0.0
    assert got["budget"]["applies"] is False and "spent" not in got["budget"]
    assert "not differentially private" in got["budget"]["why"]


def test_a_survey_with_delta_releases_under_zcdp_and_spends_its_epsilon(tmp_path):
    """``[surveys] delta``: the release is zCDP calibrated to (epsilon, delta), its numbers get
    discrete Gaussian noise, the report gives rho and delta, and the store charges epsilon."""
    got, spent = release_with(tmp_path, delta=1e-6)
    assert got["privacy"] == "zcdp" and got["delta"] == 1e-6 and got["rho"] > 0
    assert got["differentially_private"] is True and "delta = 1e-06" in got["guarantee"]
    assert got["attributes"]["height"]["noise"] == "discrete gaussian on cell sums"
    assert spent == 1.0 and got["budget"] == {"spent": 1.0, "total": 1.0, "this_release": 1.0,
                                              "delta": 1e-6}


@pytest.mark.parametrize("dp, why", [({"epsilon_budget": 2.0, "delta": 1e-6}, "delta would add"),
                                     ({"delta": 2.0}, "less than 1")])
def test_delta_settings_the_service_cannot_keep_are_refused(tmp_path, dp, why):
    from streamanon.service.config import ConfigError

    with pytest.raises(ConfigError, match=why):
        survey_config(tmp_path, **dp)
