"""SASL_SSL as operators configure it, on Apache Kafka: SCRAM-SHA-512 over TLS (a trustme
certificate), every client of the service and of ``streamanon close --via-kafka``
authenticating (the admin calls that create the topics, the collector, the control topic, the
publisher, the dead letters). The broker's clients' listener speaks SASL_SSL only, so a
release that comes out proves each of them did. A wrong password is an error at start that
says so, not a service waiting for ever."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from simulations.apache_kafka import ApacheKafka, Security
from streamanon.service.config import tomllib
from tests.docs_pages import block, page, section
from tests.service.conftest import ServiceProcess, write_config
from tests.service.kafka_helpers import secured_round_trip

USER, PASSWORD = "streamanon", "a-long-scram-secret"


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    """One Apache Kafka node whose clients' listener is SASL_SSL (SCRAM-SHA-512, user
    ``streamanon``), with a certificate for 127.0.0.1 from a test CA."""
    folder = tmp_path_factory.mktemp("sasl")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    pem, cafile = folder / "server.pem", folder / "ca.pem"
    pem.write_bytes(pkcs8 + b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    ca.cert_pem.write_to_path(str(cafile))
    with ApacheKafka(security=Security(pem, cafile, {USER: PASSWORD})) as kafka:
        yield kafka


def documented_security() -> dict[str, str]:
    """The security keys of the managed-Kafka example on guide/brokers.md, as the environment
    overrides that set them (its brokers' addresses and replication are that cluster's)."""
    example = tomllib.loads(block(section(page("guide/brokers.md"),
                                          "A managed Kafka (SASL_SSL, SCRAM)"), "toml"))["kafka"]
    keys = ("security_protocol", "sasl_mechanism", "sasl_username")
    return {f"STREAMANON_KAFKA_{key.upper()}": str(example[key]) for key in keys}


def sasl_env(kafka: ApacheKafka, env: dict[str, str], password: str) -> dict[str, str]:
    assert kafka.security is not None
    security = documented_security()
    assert security["STREAMANON_KAFKA_SASL_USERNAME"] == USER
    return {**env, **security, "STREAMANON_KAFKA_SASL_PASSWORD": password,
            "STREAMANON_KAFKA_SSL_CAFILE": str(kafka.security.cafile)}


def test_every_client_authenticates_with_scram_over_tls(tmp_path: Path, sasl_kafka, subprocesses):
    client = sasl_kafka.client_options()
    bootstrap = sasl_kafka.bootstrap
    config, env = write_config(tmp_path, bootstrap, k=5)
    env = sasl_env(sasl_kafka, env, PASSWORD)
    svc = ServiceProcess(config, env, tmp_path / "service.log")
    try:
        svc.start()  # the admin client created the topics, authenticated
        secured_round_trip(svc, config, env, bootstrap, client, "SASL_SSL")
    finally:
        svc.stop()


def test_a_wrong_password_fails_fast_with_a_clear_message(tmp_path: Path, sasl_kafka,
                                                         subprocesses):
    config, env = write_config(tmp_path, sasl_kafka.bootstrap, k=5)
    svc = ServiceProcess(config, sasl_env(sasl_kafka, env, "not-the-password"),
                         tmp_path / "service.log")
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="service exited") as exited:
            svc.start(timeout=120)
    finally:
        svc.stop()
    took = time.monotonic() - started
    said = str(exited.value)
    assert "authentication" in said.lower() and "SCRAM-SHA-512" in said, said[-1500:]
    assert "not-the-password" not in svc.log.read_text()
    assert took < 60, f"the service took {took:.0f} s to give up"  # a hang guard


def test_brokers_whose_certificate_another_ca_signed_fail_fast(tmp_path: Path, sasl_kafka,
                                                              subprocesses):
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    config, env = write_config(tmp_path, sasl_kafka.bootstrap, k=5)
    env = {**sasl_env(sasl_kafka, env, PASSWORD), "STREAMANON_KAFKA_SSL_CAFILE": str(other)}
    svc = ServiceProcess(config, env, tmp_path / "service.log")
    try:
        with pytest.raises(RuntimeError, match="service exited") as exited:
            svc.start(timeout=120)
    finally:
        svc.stop()
    said = str(exited.value)
    assert "TLS handshake with the Kafka brokers" in said and "ssl_cafile" in said, said[-1500:]
