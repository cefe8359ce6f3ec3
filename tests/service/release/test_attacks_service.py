"""anonymeter's attacks in the service's report.html, with ``[output] attacks = true``: measured
after the release is out, on a release made the same way from the stored records less a
held-out control; off by default (seconds of computation a release)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.service.conftest import ServiceProcess, services, write_config
from tests.service.kafka_helpers import produce, response

N = 1200  # the hold-out needs 1,000 records


def with_attacks(tmp, bootstrap, **kwargs):
    path, env = write_config(tmp, bootstrap, **kwargs)
    path.write_text(path.read_text().replace("[output]\n", "[output]\nattacks = true\n", 1))
    return path, env


@pytest.fixture
def attacking(tmp_path, broker, subprocesses):
    yield from services(tmp_path, broker, ServiceProcess, with_attacks)


def test_the_report_gives_the_attacks_when_asked(attacking, broker, tmp_path):
    svc = attacking(k=5)
    svc.start()
    produce(broker.bootstrap, f"{svc.prefix}.wellbeing.responses",
            [(None, response(i)) for i in range(N)])
    svc.wait_for("wellbeing", lambda s: s["stored"] == N, what="ingest")
    assert svc.post("/api/surveys/wellbeing/close")[0] == 202
    svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", what="the release",
                 timeout=300)
    directory = Path(tmp_path / "reports" / "wellbeing")  # the data holder's, apart
    attacks = json.loads((directory / "report.json").read_text())["risk"]["attacks"]
    assert attacks["measured"] is True, attacks["reason"]
    assert attacks["n_control"] >= 200 and attacks["n_original"] + attacks["n_control"] <= N
    for name in ("singling_out", "linkability"):
        risk = attacks[name]
        assert 0.0 <= risk["low"] <= risk["value"] <= risk["high"] <= 1.0, name
    page = (directory / "report.html").read_text(encoding="utf-8")
    assert '<section id="attacks">' in page and "singling out" in page
    assert "R000" not in page  # no respondent id, as everywhere


def test_attacks_are_off_by_default():
    from streamanon.service.config import OutputConfig

    assert OutputConfig().attacks is False
