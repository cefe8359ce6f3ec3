"""Every way data leaves the service, for a k-anonymous survey and an epsilon survey, checked
against the table of docs/guide/privacy.md ("What leaves the service, and who reads it").

One ``streamanon serve`` child process runs both surveys on Apache Kafka; each survey gets
responses (one of the epsilon survey's out of its declared domain, which is clamped, not
dead-lettered) and one malformed message, is closed and released. Then each surface is read
as its reader would read it: ``/api/status`` and ``/metrics`` without and with the control
token, ``/healthz``, the release topic (records and manifest), the dead-letter topic, the
release folder and the reports folder, and the service's log. A raw-derived statistic
(distortion, information loss, dead letters by reason) never reaches a reader without the
token, a topic or the published folder; no raw value reaches the log."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.service.conftest import ServiceProcess, write_config
from tests.service.kafka_helpers import produce, read_release, read_topic, response

KANON, PRIVATE = "kanon", "private"
N = 60
#: Raw values no surface but the release records may carry: an income of the k-anonymous
#: survey (its cell means replace it) and the epsilon survey's out-of-domain income.
SENTINEL_INCOME = 123457.25
OUT_OF_DOMAIN_INCOME = 350000.0

PRIVATE_SURVEY = """
[[surveys]]
id = "private"
close = "on-command"
k = 10
epsilon = 1.0

[surveys.schema]
respondent_id = { role = "identifier" }
age = { role = "quasi_identifier", type = "int", min = 16, max = 110 }
income = { role = "quasi_identifier", type = "float", min = 0, max = 300000 }
height = { role = "quasi_identifier", type = "float", min = 100, max = 220 }
satisfaction = { role = "confidential", type = "int", min = 1, max = 5 }
ticket = { role = "confidential", type = "int", min = 0, max = 1000 }
"""


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture(scope="module")
def released(apache_kafka_broker, tmp_path_factory):
    """Both surveys released by one service; yields (service, config text, tmp folder)."""
    tmp = tmp_path_factory.mktemp("surfaces")
    path, env = write_config(tmp, apache_kafka_broker.bootstrap, survey=KANON)
    # [output] reports_directory left to its default: "reports" beside the releases
    path.write_text(path.read_text() + PRIVATE_SURVEY)
    svc = ServiceProcess(path, env, tmp / "service.log")
    svc.start()
    try:
        bootstrap = apache_kafka_broker.bootstrap
        kanon = [(None, response(i, income=SENTINEL_INCOME if i == 7 else 20000.0 + i * 97.0))
                 for i in range(N)]
        private = [(None, response(i, income=OUT_OF_DOMAIN_INCOME if i == 3
                                   else 20000.0 + i * 97.0, ticket=i))
                   for i in range(N)]
        for sid, messages in ((KANON, kanon), (PRIVATE, private)):
            produce(bootstrap, f"{svc.prefix}.{sid}.responses",
                    [*messages, (None, b"{not json")])
        for sid in (KANON, PRIVATE):
            svc.wait_for(sid, lambda s: s["received"] == N + 1, what=f"{sid}'s responses")
            assert svc.post(f"/api/surveys/{sid}/close")[0] == 202
        for sid in (KANON, PRIVATE):
            svc.wait_for(sid, lambda s: s["releases"] == 1 or s["error"], timeout=180,
                         what=f"{sid}'s release")
        yield svc, tmp
    finally:
        svc.stop()


def differences(public, holder, path=""):
    """The paths where two JSON documents differ."""
    if isinstance(public, dict) and isinstance(holder, dict):
        return [d for key in sorted(set(public) | set(holder))
                for d in differences(public.get(key), holder.get(key),
                                     f"{path}.{key}" if path else key)]
    if isinstance(public, list) and isinstance(holder, list) and len(public) == len(holder):
        return [d for i, (a, b) in enumerate(zip(public, holder, strict=True))
                for d in differences(a, b, f"{path}[{i}]")]
    return [] if public == holder else [path]


def test_without_the_token_the_status_differs_only_where_it_withholds(released):
    """Read at once with and without the token (no survey changes any more): the two differ
    only in the raw-derived fields and ``withheld``, and no raw-derived value the data holder
    sees appears anywhere in the public answer. A wrong token, or none of the Bearer scheme,
    gets the public answer."""
    svc, _ = released
    for _ in range(5):  # the clocks move between the two reads: retry until they agree
        _, public_body = get(f"{svc.http}/api/status")
        _, holder_body = get(f"{svc.http}/api/status", svc.token)
        public, holder = json.loads(public_body), json.loads(holder_body)
        moving = {"now", "health"}
        for doc in (public, holder):
            for key in moving:
                doc.pop(key, None)
            for survey in doc["surveys"]:
                survey.pop("now", None)
                survey.pop("pace", None)
        found = differences(public, holder)
        if all(".release.close_to_release" not in d for d in found):
            break
    allowed = {"dead_lettered", "withheld", "release.distortion", "release.information_loss"}
    where = [d.split("]", 1)[1].lstrip(".") for d in found]
    assert where and all(w.split(".")[0] in allowed or w in allowed for w in where), found
    for survey in holder["surveys"]:
        for value in (survey["release"]["distortion"], survey["release"]["information_loss"]):
            if value is not None:
                assert repr(value) not in public_body.decode()
    for header in ("Bearer wrong", f"Basic {svc.token}", f"bearer{svc.token}"):
        request = urllib.request.Request(f"{svc.http}/api/status",
                                         headers={"Authorization": header})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert all(s["withheld"] for s in json.loads(answer.read())["surveys"]), header
            assert answer.headers["Cache-Control"] == "no-store"
            assert "Authorization" in answer.headers["Vary"]


@pytest.mark.parametrize("sid", [KANON, PRIVATE])
def test_the_status_without_the_token_has_no_raw_derived_statistic(released, sid):
    svc, _ = released
    code, body = get(f"{svc.http}/api/status")
    survey = next(s for s in json.loads(body)["surveys"] if s["id"] == sid)
    assert code == 200 and survey["error"] is None and survey["releases"] == 1
    release = survey["release"]
    assert release["distortion"] is None and release["information_loss"] is None
    assert survey["dead_lettered"] == {} and survey["dead_lettered_total"] == 1
    assert set(survey["withheld"]) == {"release.distortion", "release.information_loss",
                                       "dead_lettered"}
    # the data holder, with the token, reads them
    code, body = get(f"{svc.http}/api/status", svc.token)
    survey = next(s for s in json.loads(body)["surveys"] if s["id"] == sid)
    assert code == 200 and survey["withheld"] == []
    assert survey["dead_lettered"] == {"invalid_json": 1}
    assert survey["release"]["information_loss"] > 0
    if sid == KANON:
        assert survey["release"]["distortion"] > 0
    else:  # an epsilon survey has no distortion at all: its cells are not fitted
        assert survey["release"]["distortion"] is None


def test_an_out_of_domain_answer_of_an_epsilon_survey_is_clamped_not_dead_lettered(released):
    """Dead-lettering it would change n (the manifest's count) and a public counter: the
    survey's released records count every response, the out-of-domain one included."""
    svc, _ = released
    _, records, manifest = read_release(
        svc_bootstrap(svc), f"{svc.prefix}.{PRIVATE}.release")
    assert manifest["count"] == N == len(records)  # n counts the out-of-domain answer
    dead = read_topic(svc_bootstrap(svc), f"{svc.prefix}.{PRIVATE}.deadletter",
                      until=lambda out: False, timeout=8)  # every dead letter there is
    assert [d.value for d in dead] == [b"{not json"]


def svc_bootstrap(svc: ServiceProcess) -> str:
    return svc.config.read_text().split('bootstrap_servers = "')[1].split('"')[0]


def test_metrics_without_the_token_carry_no_raw_derived_statistic(released):
    svc, _ = released
    code, body = get(f"{svc.http}/metrics")
    text = body.decode()
    assert code == 200 and "streamanon_records_stored" in text
    assert "streamanon_release_distortion" not in text
    dead = [line for line in text.splitlines()
            if line.startswith("streamanon_records_dead_lettered_total{")]
    assert dead and all('reason="withheld"' in line for line in dead)
    code, body = get(f"{svc.http}/metrics", svc.token)
    text = body.decode()
    assert code == 200 and f'streamanon_release_distortion_count{{survey="{KANON}"}} 1.0' in text
    assert 'reason="invalid_json"' in text


def test_health_answers_carry_no_survey_data(released):
    svc, _ = released
    for path in ("/healthz", "/livez"):
        code, body = get(f"{svc.http}{path}")
        assert code == 200 and body.strip() == b"ok"


@pytest.mark.parametrize("sid", [KANON, PRIVATE])
def test_the_release_topic_carries_the_release_and_a_manifest_without_statistics(released,
                                                                                  sid):
    svc, _ = released
    _, records, manifest = read_release(svc_bootstrap(svc), f"{svc.prefix}.{sid}.release")
    assert len(records) == manifest["count"] == N
    assert {key for r in records for key in r} == {"age", "income", "height", "satisfaction",
                                                   "ticket"}
    assert SENTINEL_INCOME not in {r["income"] for r in records}
    assert set(manifest) <= {"type", "survey", "release_id", "count", "sha256", "k", "engine",
                             "incremental", "differential_privacy"}
    if sid == PRIVATE:
        assert set(manifest["differential_privacy"]) == {
            "epsilon", "mechanism", "scope", "differentially_private", "guarantee"}
        assert manifest["differential_privacy"]["differentially_private"] is True


@pytest.mark.parametrize("sid", [KANON, PRIVATE])
def test_the_published_folder_holds_the_release_only_and_the_reports_their_own(released, sid):
    _, tmp = released
    published = sorted(p.name for p in (tmp / "releases" / sid).iterdir())
    assert published == ["release.csv", "release.parquet"]
    reports = tmp / "reports" / sid
    assert {"report.json", "report.html"} <= {p.name for p in reports.iterdir()}
    report = json.loads((reports / "report.json").read_text())
    assert report["files"]["report"] == str(reports / "report.json")
    assert oct(reports.stat().st_mode & 0o777) == "0o750"
    assert oct((reports / "report.json").stat().st_mode & 0o777) == "0o640"


def test_the_log_carries_no_raw_value(released):
    svc, _ = released
    log = Path(svc.log).read_text()
    assert "released" in log or "published" in log  # the log is the service's, and complete
    for raw in (SENTINEL_INCOME, OUT_OF_DOMAIN_INCOME):
        assert f"{raw:g}" not in log and repr(raw) not in log and str(int(raw)) not in log
