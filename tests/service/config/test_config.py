from __future__ import annotations

import pytest

from streamanon.service.config import ConfigError, load_config, parse_config
from streamanon.service.kafka_clients import KafkaSettings
from streamanon.service.planning import plan_request

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}


def survey(**over):
    base = {"id": "s1", "k": 5, "close": "on-command", "schema": {
        "rid": {"role": "identifier"},
        "age": {"role": "quasi_identifier", "type": "int", "min": 0, "max": 120},
        "answer": {"role": "confidential", "type": "int"}}}
    base.update(over)
    return base


def test_minimal_config_with_defaults():
    cfg = parse_config({"surveys": [survey()]}, ENV)
    assert cfg.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert cfg.http.bind == "127.0.0.1:8080"  # loopback by default
    assert cfg.store.url.startswith("sqlite:///")
    sc = cfg.surveys[0]
    assert (sc.engine, sc.incremental, sc.duplicates) == ("auto", "auto", "reject")
    # the planner's default objective cares about quality (scheduler.quality)
    assert (sc.objective, sc.max_delta) == ("balanced", 0.05)
    assert sc.quasi_identifiers == ["age"] and sc.identifier == "rid"
    assert cfg.topic("s1", "responses") == "streamanon.s1.responses"
    assert cfg.hmac_key == b"k" * 32


def test_deadline_and_close_time():
    cfg = parse_config({"surveys": [survey(deadline="1h30m", close="2026-12-01T18:00:00Z")]},
                       ENV)
    assert cfg.surveys[0].deadline == 5400
    assert cfg.surveys[0].close_at.isoformat() == "2026-12-01T18:00:00+00:00"


def test_all_problems_reported_at_once_with_their_keys():
    bad = survey(k=0, engine="nope", incremental="magic", close="2026-12-01T18:00:00")
    bad["schema"]["rid2"] = {"role": "identifier"}
    bad["schema"]["age"]["type"] = "str"
    with pytest.raises(ConfigError) as exc:
        parse_config({"kafka": {"partitions": 0}, "http": {"bind": "nowhere"},
                      "surveys": [bad]}, ENV)
    text = str(exc.value)
    for fragment in ("kafka.partitions", "http.bind", "surveys[0](s1).k",
                     "surveys[0](s1).close"):
        assert fragment in text, fragment
    assert len(exc.value.problems) >= 4


def test_semantic_problems_are_listed_together():
    bad = survey(engine="nope", incremental="magic")
    bad["schema"]["rid2"] = {"role": "identifier"}
    bad["schema"]["age"]["type"] = "str"
    with pytest.raises(ConfigError) as exc:
        parse_config({"surveys": [bad, survey()]}, ENV)
    text = str(exc.value)
    for fragment in ("unknown engine 'nope'", "unknown stage 'magic'",
                     "exactly one field must have role 'identifier'",
                     "a quasi-identifier is int, float, bool, category or ordinal",
                     "survey id used twice"):
        assert fragment in text, fragment


def test_engine_choice_and_parameters_are_checked():
    cfg = parse_config({"surveys": [survey(engine="mona", engine_params={"rho": 0.7})]}, ENV)
    assert cfg.surveys[0].engine_params == {"rho": 0.7}
    with pytest.raises(ConfigError) as exc:
        parse_config({"surveys": [survey(id="a", engine="lda_mdav"),
                                  survey(id="b", engine="mona", engine_params={"alpha": 2})]},
                     ENV)
    text = str(exc.value)
    assert "surveys[0](a).engine: lda_mdav needs per-record parameter(s) labels" in text
    assert "surveys[1](b).engine_params: mona has no parameter alpha" in text


def test_the_stage_choice_and_the_objective_are_checked():
    cfg = parse_config({"surveys": [survey(objective="earliest", max_delta=0.1,
                                           incremental="two_stage")]}, ENV)
    sc = cfg.surveys[0]
    assert (sc.objective, sc.max_delta, sc.incremental) == ("earliest", 0.1, "two_stage")
    assert plan_request(sc).max_delta is None  # earliest: no quality bound
    request = plan_request(parse_config({"surveys": [survey(engine="mdav")]}, ENV).surveys[0])
    assert (request.engine, request.stage, request.max_delta) == ("mdav", "auto", 0.05)
    with pytest.raises(ConfigError) as exc:
        parse_config({"surveys": [survey(id="a", incremental_params={"index": "scan"})]}, ENV)
    assert 'surveys[0](a).incremental_params: incremental "auto" takes no parameters' in str(
        exc.value)
    with pytest.raises(ConfigError) as exc:
        parse_config({"surveys": [survey(id="b", objective="fastest"),
                                  survey(id="c", max_delta=-1)]}, ENV)
    text = str(exc.value)
    assert "surveys[0](b).objective" in text and "surveys[1](c).max_delta" in text


def test_a_floor_on_the_ratio_is_checked():
    assert parse_config({"surveys": [survey()]}, ENV).surveys[0].min_nu == 0.0
    assert parse_config({"surveys": [survey(min_nu=0.1)]}, ENV).surveys[0].min_nu == 0.1
    with pytest.raises(ConfigError) as exc:
        parse_config({"surveys": [survey(id="a", min_nu=1.0),
                                  survey(id="b", min_nu=0.1, deadline="30s")]}, ENV)
    text = str(exc.value)
    assert "surveys[0](a).min_nu" in text
    assert "surveys[1](b)" in text and "min_nu" in text and "deadline" in text


def test_secrets_are_refused_in_the_file_and_required_from_the_environment():
    with pytest.raises(ConfigError) as exc:
        parse_config({"http": {"token": "abc"}, "surveys": [survey()]}, {})
    text = str(exc.value)
    assert "http.token: secrets must not be in the configuration file" in text
    assert "STREAMANON_HMAC_KEY: not set" in text and "STREAMANON_HTTP_TOKEN: not set" in text


def test_secrets_from_files(tmp_path):
    (tmp_path / "hmac").write_text("h" * 40 + "\n")
    (tmp_path / "token").write_text("secret-token\n")
    cfg = parse_config({"surveys": [survey()]}, {
        "STREAMANON_HMAC_KEY_FILE": str(tmp_path / "hmac"),
        "STREAMANON_HTTP_TOKEN_FILE": str(tmp_path / "token")})
    assert cfg.hmac_key == b"h" * 40 and cfg.http_token == "secret-token"


def test_environment_overrides_the_file():
    cfg = parse_config({"kafka": {"bootstrap_servers": "a:1"}, "surveys": [survey()]},
                       {**ENV, "STREAMANON_KAFKA_BOOTSTRAP_SERVERS": "b:2",
                        "STREAMANON_HTTP_BIND": "0.0.0.0:9000"})
    assert cfg.kafka.bootstrap_servers == "b:2"
    assert cfg.http.port == 9000


def test_secrets_never_appear_in_a_dump():
    cfg = parse_config({"surveys": [survey()]}, ENV)
    dumped = cfg.model_dump_json()
    assert "kkkk" not in dumped and "tttt" not in dumped
    assert "kkkk" not in repr(cfg)


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml", ENV)
    (tmp_path / "bad.toml").write_text("[kafka\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(tmp_path / "bad.toml", ENV)


def test_serve_reports_config_errors_without_traceback(tmp_path, capsys):
    from streamanon.cli import main

    (tmp_path / "c.toml").write_text('[[surveys]]\nid = "x"\nk = 0\n')
    assert main(["serve", "--config", str(tmp_path / "c.toml")]) == 2
    err = capsys.readouterr().err
    assert "invalid configuration" in err and "surveys[0](x).k" in err
    assert "Traceback" not in err


def test_kafka_security_settings_are_checked_together(tmp_path):
    with pytest.raises(ConfigError) as exc:
        parse_config({"kafka": {"sasl_password": "in-the-file"}, "surveys": [survey()]}, ENV)
    assert "kafka.sasl_password: secrets must not be in the configuration file" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        parse_config({"kafka": {"security_protocol": "SASL_SSL",
                                "ssl_cafile": str(tmp_path / "missing.pem")},
                      "surveys": [survey()]}, ENV)
    text = str(exc.value)
    assert "kafka.sasl_mechanism: SASL_SSL needs one" in text
    assert "kafka.sasl_username: SASL_SSL needs one" in text
    assert "STREAMANON_KAFKA_SASL_PASSWORD: not set" in text
    assert f"kafka.ssl_cafile: no such file {tmp_path / 'missing.pem'}" in text
    with pytest.raises(ConfigError) as exc:
        parse_config({"kafka": {"sasl_username": "u", "ssl_cafile": "/etc/hosts"},
                      "surveys": [survey()]}, ENV)
    assert "kafka.sasl_username: only used with security_protocol SASL" in str(exc.value)
    assert "kafka.ssl_cafile: only used with security_protocol SSL" in str(exc.value)


def test_the_sasl_password_comes_from_a_file_and_stays_out_of_dumps(tmp_path):
    (tmp_path / "pw").write_text("kafka-secret\n")
    cfg = parse_config({"kafka": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                  "sasl_username": "u"}, "surveys": [survey()]},
                       {**ENV, "STREAMANON_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "pw")})
    settings = KafkaSettings.from_config(cfg)
    assert settings.python_options()["sasl_plain_password"] == "kafka-secret"
    assert settings.librdkafka_options()["sasl.password"] == "kafka-secret"
    assert "kafka-secret" not in cfg.model_dump_json() and "kafka-secret" not in repr(cfg)
    assert "kafka-secret" not in repr(settings)


def test_the_collector_session_timeout_is_set_and_bounded():
    assert parse_config({"surveys": [survey()]}, ENV).kafka.session_timeout_ms == 30_000
    cfg = parse_config({"kafka": {"session_timeout_ms": 10_000}, "surveys": [survey()]}, ENV)
    assert cfg.kafka.session_timeout_ms == 10_000
    with pytest.raises(ConfigError, match=r"kafka\.session_timeout_ms"):
        parse_config({"kafka": {"session_timeout_ms": 500}, "surveys": [survey()]}, ENV)
