"""Every Kafka client of the service and of ``streamanon close --via-kafka`` speaks TLS when
the configuration says so: the embedded broker runs behind a TLS-terminating proxy (test code),
the only address it advertises, with a certificate from a test CA (trustme). A plaintext client
cannot talk to it, so a release that comes out proves every client used TLS."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from streamanon.service.broker import BrokerError, broker_binary, free_port, wait_for_kafka
from streamanon.service.config import parse_config
from streamanon.service.kafka_clients import KafkaSettings
from tests.service.conftest import ServiceProcess, write_config
from tests.service.kafka_helpers import secured_round_trip


class TlsProxy:
    """Accepts TLS on ``listen`` and relays the plain bytes to ``target``, in a thread."""

    def __init__(self, context: ssl.SSLContext, listen: int, target: int) -> None:
        self.context, self.listen, self.target = context, listen, target
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())
        self.ready.set()
        self.loop.run_forever()

    async def _serve(self) -> None:
        async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while data := await reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                writer.close()

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

        self.server = await asyncio.start_server(relay, "127.0.0.1", self.listen,
                                                 ssl=self.context)

    def start(self) -> None:
        self.thread.start()
        self.ready.wait(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    ca = trustme.CA()
    cafile = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(cafile))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    inner, outer = free_port(), free_port()
    proxy = TlsProxy(server, outer, inner)
    proxy.start()
    broker = subprocess.Popen(
        [broker_binary(), "broker", "--listener-url", f"tcp://127.0.0.1:{inner}",
         "--advertised-listener-url", f"tcp://127.0.0.1:{outer}",
         "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        from confluent_kafka.admin import AdminClient

        for _ in range(100):
            try:
                AdminClient({"bootstrap.servers": f"127.0.0.1:{outer}",
                             "security.protocol": "SSL", "ssl.ca.location": str(cafile)}
                            ).list_topics(timeout=3)
                break
            except Exception:  # the broker is still starting
                threading.Event().wait(0.2)
        yield f"127.0.0.1:{outer}", cafile
    finally:
        broker.terminate()
        broker.wait(10)
        proxy.stop()


def test_the_client_settings_carry_tls_and_sasl(tmp_path):
    cafile = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(cafile))
    raw = {"kafka": {"bootstrap_servers": "kafka:9093", "security_protocol": "SASL_SSL",
                     "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "streamanon",
                     "ssl_cafile": str(cafile)},
           "surveys": [{"id": "s", "close": "on-command", "k": 3, "schema": {
               "rid": {"role": "identifier"},
               "age": {"role": "quasi_identifier", "type": "int"}}}]}
    env = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32,
           "STREAMANON_KAFKA_SASL_PASSWORD": "pw-from-env"}
    options = KafkaSettings.from_config(parse_config(raw, env)).python_options()
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "streamanon"
    assert options["sasl_plain_password"] == "pw-from-env"
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    plain = parse_config({**raw, "kafka": {"bootstrap_servers": "kafka:9092"}}, env)
    assert KafkaSettings.from_config(plain).python_options() == {
        "bootstrap_servers": "kafka:9092", "security_protocol": "PLAINTEXT"}


def test_every_client_speaks_tls(tmp_path, tls_broker):
    bootstrap, cafile = tls_broker
    with pytest.raises(BrokerError):  # the proxy speaks TLS only
        wait_for_kafka(bootstrap, timeout=3)
    tls = {"security.protocol": "SSL", "ssl.ca.location": str(cafile)}
    config, env = write_config(tmp_path, bootstrap, k=5)
    env.update(STREAMANON_KAFKA_SECURITY_PROTOCOL="SSL", STREAMANON_KAFKA_SSL_CAFILE=str(cafile))
    svc = ServiceProcess(config, env, tmp_path / "service.log")
    try:
        svc.start()  # the admin client created the topics over TLS
        secured_round_trip(svc, config, env, bootstrap, tls, "TLS")
    finally:
        svc.stop()
