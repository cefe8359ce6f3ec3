"""The dashboard in a real browser (headless Debian Chromium driven by Playwright): the numbers
it shows are those of /api/status, they change as records arrive without a reload, and the
release report appears after close. Saves a screenshot under tests/artifacts/."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from tests.service.kafka_helpers import produce, response

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_dashboard_shows_live_status_and_the_release(service_factory, broker, browser):
    svc = service_factory(k=5)
    svc.start()
    with urllib.request.urlopen(f"{svc.http}/static/vendor/uPlot.iife.min.js") as r:
        assert r.status == 200  # the chart library is served locally, no CDN
    topic = f"{svc.prefix}.wellbeing.responses"
    produce(broker.bootstrap, topic, [(None, response(i)) for i in range(150)]
            + [(None, b"{broken")])
    svc.wait_for("wellbeing", lambda s: s["stored"] == 150, what="first batch")

    page = browser.new_page(viewport={"width": 1366, "height": 900})
    page.goto(svc.http + "/")
    survey = page.locator('section.survey[data-survey="wellbeing"]')
    stored = survey.locator('[data-field="stored"]')
    page.wait_for_function(
        "document.querySelector('[data-survey=wellbeing] [data-field=stored]')"
        "?.textContent === '150'", timeout=30_000)
    status = svc.survey("wellbeing")
    assert _number(stored.inner_text()) == status["stored"] == 150
    assert _number(survey.locator('[data-field="received"]').inner_text()) \
        == status["received"] == 151
    assert survey.locator('[data-field="state"]').inner_text() == status["state"] == "OPEN"
    # without the control token the dead letters' reasons are withheld (computed on the
    # raw answers); with it, the page shows them
    dead = survey.locator('[data-field="dead"]').inner_text()
    assert "invalid_json" not in dead and "withheld" in dead and "all reasons" in dead
    page.fill('[data-testid="token"]', svc.token)
    page.click('#token-form button')
    page.wait_for_function(
        "document.querySelector('[data-survey=wellbeing] [data-field=dead]')"
        "?.textContent.includes('invalid_json')", timeout=30_000)
    dead = survey.locator('[data-field="dead"]').inner_text()
    assert "invalid_json" in dead and dead.split()[-1] == "1"
    assert survey.locator("canvas").count() >= 1  # the arrivals chart is drawn

    # more records arrive: the page follows without a reload
    produce(broker.bootstrap, topic, [(None, response(i)) for i in range(150, 400)])
    svc.wait_for("wellbeing", lambda s: s["stored"] == 400, what="second batch")
    page.wait_for_function(
        "document.querySelector('[data-survey=wellbeing] [data-field=stored]')"
        "?.textContent === '400'", timeout=30_000)
    assert _number(stored.inner_text()) == svc.survey("wellbeing")["stored"]

    # close: the release report appears with the numbers of /api/status
    assert svc.post("/api/surveys/wellbeing/close")[0] == 202
    released = svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", what="release")
    page.wait_for_function(
        "document.querySelector('[data-survey=wellbeing] [data-field=state]')"
        "?.textContent === 'RELEASED'", timeout=30_000)
    table = survey.locator('[data-field="release"]').inner_text()
    rel = released["release"]
    assert f"{rel['n']:,}" in table and f"{rel['information_loss']:.2f} %" in table
    assert f"{rel['distortion']:.4f}" in table
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    # the same final state as one self-contained page (what the demo writes): it renders
    # without the service and fetches nothing
    from streamanon.simulation.simulate import write_dashboard_snapshot

    final = svc.status()  # the data holder's, with the token
    snapshot = write_dashboard_snapshot(ARTIFACTS / "dashboard.html", final, "wellbeing", 12.5)
    svc.stop()
    offline = browser.new_page(viewport={"width": 1366, "height": 900})
    requests: list[str] = []
    offline.on("request", lambda request: requests.append(request.url))
    offline.goto(snapshot.as_uri())
    frozen = offline.locator('section.survey[data-survey="wellbeing"]')
    assert frozen.locator('[data-field="state"]').inner_text() == "RELEASED"
    frozen_table = frozen.locator('[data-field="release"]').inner_text()
    assert f"{rel['n']:,}" in frozen_table and f"{rel['distortion']:.4f}" in frozen_table
    assert "one-shot measured" in frozen_table and "12.50 s" in frozen_table
    assert offline.locator("#connection").inner_text().startswith("snapshot")
    assert frozen.locator("canvas").count() >= 1
    assert requests == [snapshot.as_uri()]
    offline.screenshot(path=str(ARTIFACTS / "dashboard-snapshot.png"), full_page=True)
