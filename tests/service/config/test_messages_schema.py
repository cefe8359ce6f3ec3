"""Config load refuses a schema whose published fields the release could not type."""

from __future__ import annotations

import pytest

from streamanon.service.config import ConfigError, parse_config

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}


def config(**fields):
    schema = {"rid": {"role": "identifier"},
              "age": {"role": "quasi_identifier", "type": "int", "min": 0, "max": 120}}
    schema.update(fields)
    return {"surveys": [{"id": "s1", "k": 5, "schema": schema}]}


@pytest.mark.parametrize("field,role", [("satisfaction", "confidential"), ("region", "label")])
def test_a_published_field_needs_a_type(field, role):
    with pytest.raises(ConfigError) as exc:
        parse_config(config(**{field: {"role": role}}), ENV)
    assert (f"surveys[0](s1).schema.{field}: a {role} field needs a type "
            "(int, float, str, bool, timestamp or text)") in str(exc.value)
    for kind in ("int", "float", "str", "bool"):
        parse_config(config(**{field: {"role": role, "type": kind}}), ENV)


def test_an_identifier_is_a_string_or_an_integer():
    with pytest.raises(ConfigError) as exc:
        parse_config(config(rid={"role": "identifier", "type": "float"}), ENV)
    assert "surveys[0](s1).schema.rid.type: an identifier is str or int" in str(exc.value)
    for kind in ("str", "int"):
        parse_config(config(rid={"role": "identifier", "type": kind}), ENV)


def test_bounds_need_a_numeric_type_even_on_an_ignored_field():
    with pytest.raises(ConfigError) as exc:
        parse_config(config(note={"role": "ignore", "min": 0}), ENV)
    assert "surveys[0](s1).schema.note: bounds need a numeric type" in str(exc.value)


def test_max_message_bytes_is_bounded_and_overridable():
    assert parse_config(config(), ENV).kafka.max_message_bytes == 1024 * 1024
    env = {**ENV, "STREAMANON_KAFKA_MAX_MESSAGE_BYTES": "65536"}
    assert parse_config(config(), env).kafka.max_message_bytes == 65536
    with pytest.raises(ConfigError, match=r"kafka\.max_message_bytes"):
        parse_config({**config(), "kafka": {"max_message_bytes": 10}}, ENV)
