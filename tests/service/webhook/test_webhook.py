"""The submissions endpoint's parts without a broker: KoboToolbox's JSON read with the
schema's names and types, HTTP Basic credentials, the rate limit, and the answers of
:class:`WebhookIntake` (with a producer that acknowledges, fails or never answers)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time

import pytest

from streamanon.service.config import ConfigError, parse_config
from streamanon.service.deadletters import KafkaDeadLetters
from streamanon.service.validation import Invalid, Validator
from streamanon.service.webhook import RateLimiter, WebhookIntake, basic_auth_ok, from_kobo
from tests.service.webhook_helpers import (
    PASSWORD,
    SCHEMA,
    basic,
    submission,
    webhook_section,
)

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32,
       "STREAMANON_WEBHOOK_PASSWORD": PASSWORD}


def config(webhook: str | None = None, env: dict[str, str] | None = None):
    text = f'[[surveys]]\nid = "hh"\nk = 3\nengine = "mdav"\n{SCHEMA}' \
           + (webhook_section() if webhook is None else webhook)
    return parse_config(tomllib.loads(text), ENV if env is None else env)


def test_a_kobo_submission_becomes_a_response_with_the_schemas_names_and_types():
    survey = config().surveys[0]
    out = from_kobo(submission(5), survey)  # 5 = water and gas
    assert out == {"instanceID": "uuid:5a3c00000005-0000-4000-8000-000000000000",
                   "household/age": 53, "household/size": 6, "education": "tertiary",
                   "region": "south", "services/water": True, "services/electricity": False,
                   "services/gas": True, "satisfaction": 1}
    Validator(survey, b"k" * 32).validate(json.dumps(out).encode())  # what the collector checks


def test_metadata_the_schema_does_not_name_is_dropped_and_named_metadata_is_kept():
    text = SCHEMA.replace('region = {', '_submission_time = { role = "confidential", '
                          'type = "timestamp" }\nregion = {')
    survey = parse_config(tomllib.loads(f'[[surveys]]\nid = "hh"\nk = 3\nengine = "mdav"\n'
                                        f'{text}{webhook_section()}'), ENV).surveys[0]
    out = from_kobo(submission(1), survey)
    assert out["_submission_time"] == "2026-11-27T08:07:13"
    assert not {"_id", "_uuid", "formhub/uuid", "start", "end", "__version__",
                "_geolocation", "meta/instanceID"} & set(out)


@pytest.mark.parametrize("override, reason, field", [
    ({"household/age": "forty"}, "wrong_type", "household/age"),
    ({"household/age": "12.5"}, "wrong_type", "household/age"),
    ({"services": "water solar"}, "out_of_levels", "services"),
    ({"services": ["water"]}, "wrong_type", "services"),
    ({"household/size": [{"member/age": "3"}]}, "wrong_type", "household/size"),
])
def test_a_value_that_cannot_be_read_is_invalid_and_the_reason_names_no_value(
        override, reason, field):
    with pytest.raises(Invalid) as caught:
        from_kobo(submission(1, **override), config().surveys[0])
    assert caught.value.reason == reason and caught.value.detail.startswith(field)
    assert "forty" not in caught.value.detail and "solar" not in caught.value.detail


def test_basic_credentials():
    assert basic_auth_ok(basic(), "kobo", PASSWORD)
    for header in (None, "", basic(password="wrong"), basic(username="kob"), "Bearer x",
                   "Basic !!!not-base64", "Basic " + "a2Vybm8="):  # "kerno", no colon
        assert not basic_auth_ok(header, "kobo", PASSWORD), header
    assert not basic_auth_ok(basic(password=""), "kobo", "")  # no password: nobody gets in


def test_the_rate_limit_is_a_bucket_per_client():
    limiter = RateLimiter(rate=2.0, burst=3, clients=2)
    assert [limiter.allow("a", now=0.0) for _ in range(4)] == [True, True, True, False]
    assert limiter.allow("b", now=0.0)  # another client has its own bucket
    assert not limiter.allow("a", now=0.1) and limiter.allow("a", now=0.6)  # 2 a second
    limiter.allow("c", now=1.0)  # a third client: the least recently used is forgotten
    assert set(limiter._buckets) == {"a", "c"}


def test_a_webhook_needs_its_password_and_checks_its_settings():
    with pytest.raises(ConfigError, match="STREAMANON_WEBHOOK_PASSWORD: not set"):
        config(env={k: v for k, v in ENV.items() if "WEBHOOK" not in k})
    with pytest.raises(ConfigError, match="STREAMANON_WEBHOOK_PASSWORD: too short"):
        config(env={**ENV, "STREAMANON_WEBHOOK_PASSWORD": "short"})
    with pytest.raises(ConfigError, match="surveys"):
        config(webhook='\n[surveys.webhook]\nformat = "xml"\nusername = "kobo"\n')
    with pytest.raises(ConfigError, match="secrets must not be in the configuration file"):
        config(webhook=webhook_section(password="in-the-file"))


class FakeProducer:
    """Acknowledges each send (or fails it, or never answers); keeps what it was given."""

    def __init__(self, outcome: str = "ack") -> None:
        self.outcome, self.sent = outcome, []

    def send(self, topic, key=None, value=None, headers=None):
        self.sent.append((topic, key, value, headers))
        return sent_future(self.outcome)


def sent_future(outcome: str) -> concurrent.futures.Future:
    """A send's future: acknowledged, or failed as a broker that does not answer."""
    sent: concurrent.futures.Future = concurrent.futures.Future()
    if outcome == "ack":
        sent.set_result((0, 0))
    else:
        sent.set_exception(TimeoutError("no answer from the broker"))
    return sent


def submit(intake, body, *, auth=None, client="10.0.0.1"):
    return asyncio.run(intake.submit("hh", authorization=basic() if auth is None else auth,
                                     client=client, body=body))


def test_the_answers():
    cfg = config(webhook_section(burst=4, rate_per_second=0.001))
    producer = FakeProducer()
    intake = WebhookIntake(cfg, producer)
    status, body, _ = submit(intake, json.dumps(submission(1)).encode())
    assert status == 202 and body == {"survey": "hh", "accepted": True}
    topic, key, value, _ = producer.sent[-1]
    assert topic.endswith(".hh.responses")
    assert key == b"uuid:5a3c00000001-0000-4000-8000-000000000000"
    assert json.loads(value)["household/age"] == 25
    status, _, headers = submit(intake, b"{}", auth=basic(password="nope"))
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    status, body, _ = submit(intake, json.dumps(submission(2, **{"household/age": "300"})).encode())
    assert status == 422 and body["reason"] == "out_of_bounds" and "300" not in json.dumps(body)
    topic, _, dead, letter_headers = producer.sent[-1]
    assert topic.endswith(".hh.deadletter") and json.loads(dead)["household/age"] == "300"
    assert dict(letter_headers)["streamanon-reason"] == b"out_of_bounds"  # the original, kept
    assert submit(intake, None)[0] == 413
    status, _, headers = submit(intake, b"{}")  # the fifth within the burst of 4
    assert status == 429 and "Retry-After" in headers
    assert submit(intake, json.dumps(submission(3)).encode(), client="10.0.0.2")[0] == 202
    intake.close()


def test_without_the_brokers_acknowledgement_the_answer_is_503_retry_later(monkeypatch):
    monkeypatch.setattr("streamanon.service.webhook.ACK_SECONDS", 0.2)
    intake = WebhookIntake(config(), FakeProducer("fail"))
    status, body, headers = submit(intake, json.dumps(submission(1)).encode())
    assert status == 503 and headers["Retry-After"]
    # a dead letter given up after the answer (its second attempt, 1 s on): the sending
    # thread lives on (it died on setting the result of the future the answer had cancelled)
    intake._dead_letters = KafkaDeadLetters(intake.producer, attempts=2, retry_backoff=1.0)
    status, body, _ = submit(intake, json.dumps(submission(2, satisfaction="9")).encode())
    assert status == 503 and body["reason"] == "out_of_bounds"  # not dead-lettered: retry
    letters = intake._dead_letters
    deadline = time.monotonic() + 10
    while letters.failed == 0 and letters.alive and time.monotonic() < deadline:
        time.sleep(0.05)  # until the second attempt is given up
    time.sleep(0.2)
    assert letters.failed == 1 and letters.alive
    intake.close()


def test_the_json_format_takes_the_schemas_own_names():
    intake = WebhookIntake(config(webhook_section("json")), producer := FakeProducer())
    flat = {"instanceID": "r1", "household/age": 30, "household/size": 2,
            "education": "primary", "region": "north", "services/water": True,
            "services/electricity": False, "services/gas": False, "satisfaction": 3}
    assert submit(intake, json.dumps(flat).encode())[0] == 202
    assert json.loads(producer.sent[-1][2]) == flat
    status, body, _ = submit(intake, json.dumps(submission(1)).encode())  # Kobo's: not flat
    assert status == 422 and body["reason"] in ("missing_field", "unexpected_field")


def test_a_schema_written_from_the_xlsform_takes_kobos_submissions(tmp_path):
    """The form's schema (``streamanon schema from-xlsform``) and KoboToolbox's pushes agree
    on names: group paths, select_multiple choices as PATH/CHOICE, meta/instanceID."""
    import contextlib
    import io

    import openpyxl

    from streamanon.cli import main

    book = openpyxl.Workbook()
    survey = book.active
    survey.title = "survey"
    for row in [("type", "name", "label", "constraint", "required"),
                ("start", "start", None, None, None),
                ("begin group", "household", "Household", None, None),
                ("integer", "age", "Age", ". >= 16 and . <= 110", "yes"),
                ("integer", "size", "Size", ". >= 1 and . <= 30", "yes"),
                ("end group", "household", None, None, None),
                ("select_one edu", "education", "Education", None, "yes"),
                ("select_multiple svc", "services", "Services", None, None),
                ("integer", "satisfaction", "Satisfaction", ". >= 1 and . <= 5", "yes")]:
        survey.append(row)
    choices = book.create_sheet("choices")
    choices.append(("list_name", "name", "label"))
    for name in ("primary", "secondary", "tertiary"):
        choices.append(("edu", name, name))
    for name in ("water", "electricity", "gas"):
        choices.append(("svc", name, name))
    book.save(tmp_path / "hh.xlsx")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["schema", "from-xlsform", str(tmp_path / "hh.xlsx"), "--qi",
                     "household/age,household/size,education", "--ordinal", "education",
                     "--identifier", "meta/instanceID",
                     "--out", str(tmp_path / "hh.toml")]) == 0
    fields = tomllib.loads((tmp_path / "hh.toml").read_text())["schema"]
    sc = parse_config({"surveys": [{"id": "hh", "k": 3, "engine": "mdav", "schema": fields,
                                    "webhook": {"username": "kobo"}}]}, ENV).surveys[0]
    for i in range(8):
        response = from_kobo(submission(i), sc)
        assert response["meta/instanceID"].startswith("uuid:")
        assert response["services/gas"] is ("gas" in submission(i)["services"].split())
        Validator(sc, b"k" * 32).validate(json.dumps(response).encode())
