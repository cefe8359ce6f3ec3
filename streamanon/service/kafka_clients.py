"""The one door to Kafka: every client the service and the CLI use is built here.

No other module of ``streamanon/`` or ``scheduler/`` imports a Kafka client library
(``tests/test_architecture.py`` checks it). Each client is made from one
:class:`KafkaSettings` (brokers, security protocol, TLS files, SASL mechanism and credentials,
client id), mapped here once per library:

- **aiokafka** for the collector's group consumer on the event loop (``getmany`` batches,
  manual commits, a rebalance listener, pause and resume, seeks) and the reader of the
  group's committed offsets;
- **confluent-kafka** (librdkafka) for everything else: the producers that must send a
  million records in seconds (the release publisher, the simulated respondents, the
  simulation's bulk load), the admin client that probes a broker and creates topics, the
  service's producer (:class:`ServiceProducer`: dead letters, webhook submissions, the CLI's
  signed close) and the reader of partition ends and records near them (a consumer that never
  joins a group).

Why two and not one is on the architecture page ("Kafka clients", with the consumer
benchmark, ``simulations/bench_ingest_consumers.py``). Each library is imported inside the function
that builds its client, so that importing this module loads no Kafka client (and the
respondents' spawned process loads librdkafka only).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamanon.errors import StreamanonError

if TYPE_CHECKING:
    from streamanon.service.config import Config

#: Where the release publisher's librdkafka logs (``logger`` of :func:`rdkafka_producer`).
LIBRDKAFKA_LOGGER = "streamanon.service.publisher.librdkafka"
#: Where librdkafka logs for the door's other clients (admin, service producer, reader).
LIBRDKAFKA_CLIENTS_LOGGER = "streamanon.service.kafka_clients.librdkafka"
#: The loggers of the Kafka clients: aiokafka's, and librdkafka's (two).
CLIENT_LOGGERS = ("aiokafka", LIBRDKAFKA_LOGGER, LIBRDKAFKA_CLIENTS_LOGGER)


@dataclass(frozen=True)
class KafkaSettings:
    """How to reach the brokers, for every client: the ``[kafka]`` section's connection and
    security keys and the SASL password (which is never in the file). ``client_id`` None
    leaves each library's own."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str = field(default="", repr=False)
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    client_id: str | None = None

    @classmethod
    def from_config(cls, config: Config) -> KafkaSettings:
        kafka = config.kafka
        return cls(bootstrap_servers=kafka.bootstrap_servers,
                   security_protocol=kafka.security_protocol,
                   sasl_mechanism=kafka.sasl_mechanism, sasl_username=kafka.sasl_username,
                   sasl_password=config.kafka_sasl_password, ssl_cafile=kafka.ssl_cafile,
                   ssl_certfile=kafka.ssl_certfile, ssl_keyfile=kafka.ssl_keyfile,
                   client_id=kafka.client_id)

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    def python_options(self) -> dict[str, Any]:
        """Connection keyword arguments of aiokafka's clients (Python names): brokers, security
        protocol, a TLS context built from the files (the system CAs when no CA file is given),
        the SASL credentials, the client id."""
        options: dict[str, Any] = {"bootstrap_servers": self.bootstrap_servers,
                                   "security_protocol": self.security_protocol}
        if self.tls:
            import ssl

            context = ssl.create_default_context(
                cafile=None if self.ssl_cafile is None else str(self.ssl_cafile))
            if self.ssl_certfile is not None:
                context.load_cert_chain(str(self.ssl_certfile),
                                        None if self.ssl_keyfile is None
                                        else str(self.ssl_keyfile))
            options["ssl_context"] = context
        if self.sasl:
            options.update(sasl_mechanism=self.sasl_mechanism,
                           sasl_plain_username=self.sasl_username,
                           sasl_plain_password=self.sasl_password)
        if self.client_id is not None:
            options["client_id"] = self.client_id
        return options

    def librdkafka_options(self) -> dict[str, Any]:
        """The same settings in librdkafka's names (confluent-kafka): brokers, security
        protocol, TLS files (the system CAs, ``probe``, when no CA file is given), the SASL
        credentials, the client id."""
        options: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers,
                                   "security.protocol": self.security_protocol}
        if self.tls:
            options["ssl.ca.location"] = str(self.ssl_cafile) if self.ssl_cafile else "probe"
            if self.ssl_certfile is not None:
                options["ssl.certificate.location"] = str(self.ssl_certfile)
            if self.ssl_keyfile is not None:
                options["ssl.key.location"] = str(self.ssl_keyfile)
        if self.sasl:
            options.update({"sasl.mechanism": self.sasl_mechanism or "PLAIN",
                            "sasl.username": self.sasl_username or "",
                            "sasl.password": self.sasl_password})
        if self.client_id is not None:
            options["client.id"] = self.client_id
        return options


# -- errors ------------------------------------------------------------------------------------

def broker_errors() -> tuple[type[BaseException], ...]:
    """What a read or a send raises while a broker is away or slow (every client's kinds):
    worth waiting for and trying again, unlike a fault in the data."""
    from aiokafka.errors import KafkaError as AIOKafkaError
    from confluent_kafka import KafkaException

    from streamanon.errors import PublishError

    return (AIOKafkaError, KafkaException, PublishError, OSError, TimeoutError)


def client_error() -> type[BaseException]:
    """The error of the librdkafka clients (:func:`probe`, :func:`create_topics`,
    :func:`producer`, :func:`position_reader`): ``KafkaException``, its ``args[0]`` a
    ``KafkaError`` with a code."""
    from confluent_kafka import KafkaException

    return KafkaException


def fetch_errors() -> tuple[tuple[type[BaseException], ...], type[BaseException]]:
    """The collector consumer's errors: those of a record that cannot be decoded (a corrupt
    batch, a codec it lacks), and the base class of its broker errors."""
    from aiokafka.errors import CorruptRecordException, KafkaError, UnsupportedCodecError

    return (CorruptRecordException, UnsupportedCodecError), KafkaError


# -- admin -------------------------------------------------------------------------------------

class BrokersRefused(StreamanonError):
    """The brokers refused the service's credentials (SASL) or its TLS handshake: no wait
    makes them accept, so the caller stops and says so."""


def _admin(settings: KafkaSettings, on_error: Callable[[Any], None] | None = None) -> Any:
    from confluent_kafka.admin import AdminClient

    options = {**settings.librdkafka_options(),
               "logger": logging.getLogger(LIBRDKAFKA_CLIENTS_LOGGER)}
    if on_error is not None:
        options["error_cb"] = on_error
    return AdminClient(options)


def _metadata(settings: KafkaSettings, timeout: float) -> tuple[Any, Any]:
    """A new admin client and the brokers' metadata, asked for a second at a time until
    ``timeout`` (then ``KafkaException``, as librdkafka raises it); a refusal of the
    credentials or of the TLS handshake raises :class:`BrokersRefused` at once, with
    librdkafka's words for it (a wrong password would otherwise look like brokers that never
    answer)."""
    import time

    from confluent_kafka import KafkaError, KafkaException

    refusals: list[tuple[bool, str]] = []  # (a TLS failure, librdkafka's words)

    def on_error(err: Any) -> None:
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            refusals.append((err.code() == KafkaError._SSL, err.str()))

    admin = _admin(settings, on_error)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return admin, admin.list_topics(timeout=min(1.0, max(deadline - time.monotonic(),
                                                                 0.001)))
        except KafkaException:
            admin.poll(0)  # serves the error callbacks
            if refusals:
                raise BrokersRefused(_refused(settings, *refusals[0])) from None
            if time.monotonic() >= deadline:
                raise


def _refused(settings: KafkaSettings, tls: bool, said: str) -> str:
    if tls:
        return (f"the TLS handshake with the Kafka brokers at {settings.bootstrap_servers} "
                f"failed ({settings.security_protocol}): {said}; check [kafka] ssl_cafile (the "
                "CA that signed the brokers' certificates), ssl_certfile and ssl_keyfile")
    return (f"the Kafka brokers at {settings.bootstrap_servers} refused the credentials of "
            f"user {settings.sasl_username!r} ({settings.security_protocol}, "
            f"{settings.sasl_mechanism}): {said}; check [kafka] sasl_username, sasl_mechanism "
            "and the password (STREAMANON_KAFKA_SASL_PASSWORD or _FILE)")


def probe(settings: KafkaSettings, seconds: float) -> None:
    """Fetch the brokers' metadata once with a new admin client, waiting at most ``seconds``
    (raises ``KafkaException`` when no broker answered in time, :class:`BrokersRefused`
    when they refused the credentials or the TLS handshake)."""
    _metadata(settings, max(seconds, 0.001))


def create_topics(settings: KafkaSettings, wanted: dict[str, int],
                  configs: dict[str, dict[str, str]] | None = None,
                  timeout: float = 30.0, replicas: int = -1) -> None:
    """Create the topics of ``wanted`` (name -> partitions) that do not exist yet, with the
    settings ``configs`` gives them and ``replicas`` copies (-1: the brokers'
    ``default.replication.factor``); a topic that exists keeps its own (idempotent: one that
    another client creates meanwhile is no error)."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    admin, metadata = _metadata(settings, timeout)
    existing = set(metadata.topics)
    new = [NewTopic(n, num_partitions=p, replication_factor=replicas,
                    config=dict((configs or {}).get(n) or {}))
           for n, p in wanted.items() if n not in existing]
    if not new:
        return
    for future in admin.create_topics(new, request_timeout=timeout).values():
        try:
            future.result(timeout)
        except client_error() as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


# -- producers ---------------------------------------------------------------------------------

class ProducerKeeper:
    """Makes confluent-kafka producers from ``options`` and replaces one that failed: a fatal
    error (its ``error_cb``; the options' own callback, if any, is still called) or a delivery
    that failed (:meth:`spoil`). An idempotent producer whose brokers no longer know its id
    (an in-memory broker restarted, an unclean election) either gets a fatal error or times
    out every send after it; a new producer gets a new id. What the old one still held was
    failed, and its sender tries again through :meth:`renewed`."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = dict(options)
        self._theirs = self.options.pop("error_cb", None)
        self.spoiled: str | None = None  # why the current producer is to be replaced

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            self.spoil(f"a fatal error: {err.str()}")
        if self._theirs is not None:
            self._theirs(err)

    def spoil(self, why: str) -> None:
        """The current producer is to be replaced at the next :meth:`renewed` (``why``: for
        the log, without values)."""
        self.spoiled = why

    def producer(self) -> Any:
        from confluent_kafka import Producer

        self.spoiled = None
        return Producer({**self.options, "error_cb": self._on_error})

    def renewed(self, producer: Any) -> Any:
        """``producer``, or a new one when it failed (logged, without values)."""
        if self.spoiled is None:
            return producer
        logging.getLogger(__name__).warning(
            "a Kafka producer failed (%s); a new one takes over", self.spoiled)
        producer.purge()
        producer.flush(0)
        return self.producer()


class ServiceProducer:
    """A confluent-kafka ``Producer`` whose :meth:`send` returns a future: the service's
    producer of dead letters and webhook submissions, and the CLI's signed close.

    librdkafka reports a delivery through a callback that runs inside ``poll``; a thread of
    this object polls, so the futures settle without their callers polling. A full send
    queue (``BufferError``) makes :meth:`send` wait up to ``max_block`` seconds for room.

    The producer is idempotent where the options say so; one whose brokers lost its state (a
    broker replaced with an empty one, an unclean election) can send no more, so after a fatal
    error or a failed delivery the next :meth:`send` makes a new one (:class:`ProducerKeeper`)."""

    def __init__(self, options: dict[str, Any], max_block: float = 60.0) -> None:
        import threading

        self._keeper = ProducerKeeper(options)
        self._producer = self._keeper.producer()
        self.max_block = max_block
        self.closed = False
        self._poller = threading.Thread(target=self._poll, name="kafka-producer-poll",
                                        daemon=True)
        self._poller.start()

    @property
    def alive(self) -> bool:
        """Whether the producer is open and its polling thread runs (for the health check)."""
        return not self.closed and self._poller.is_alive()

    def send(self, topic: str, *, key: bytes | None = None, value: bytes | None = None,
             headers: list[tuple[str, bytes]] | None = None) -> Future[tuple[int, int]]:
        """Queue a record; the future gives (partition, offset) once the brokers acknowledge
        it, or raises ``KafkaException``."""
        import time

        if self.closed:
            raise RuntimeError("the producer is closed")
        self._producer = self._keeper.renewed(self._producer)
        done: Future[tuple[int, int]] = Future()

        def delivered(error: Any, message: Any) -> None:
            if done.done():
                return
            if error is not None:
                self._keeper.spoil(f"a delivery failed: {error.str()}")
                done.set_exception(client_error()(error))
            else:
                done.set_result((message.partition(), message.offset()))

        deadline = time.monotonic() + self.max_block
        while True:
            try:
                self._producer.produce(topic, key=key, value=value, headers=headers,
                                       on_delivery=delivered)
                return done
            except BufferError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no room in the send queue in {self.max_block:.0f} s"
                                       ) from None
                self._producer.poll(0.05)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record queued so far is acknowledged or failed; whether none
        remain."""
        return self._producer.flush(-1 if timeout is None else timeout) == 0

    def close(self, timeout: float = 30.0) -> None:
        """Flush (at most ``timeout`` seconds), then stop polling."""
        if self.closed:
            return
        self.flush(timeout)
        self.closed = True
        self._poller.join(timeout)

    def _poll(self) -> None:
        while not self.closed:
            self._producer.poll(0.1)


def producer(settings: KafkaSettings, tuning: dict[str, Any] | None = None) -> ServiceProducer:
    """A :class:`ServiceProducer` (``send`` returns a future): the service's producer of dead
    letters and webhook submissions, and the CLI's signed close. ``tuning``: its settings
    besides the connection, in librdkafka's names (``linger.ms``, ``acks``, ...). A record the
    brokers have not taken in two minutes fails (``message.timeout.ms``; librdkafka's own is
    five), so that a stop while they are away ends in that time."""
    return ServiceProducer({**settings.librdkafka_options(), "message.timeout.ms": 120_000,
                            **(tuning or {}),
                            "logger": logging.getLogger(LIBRDKAFKA_CLIENTS_LOGGER)})


def rdkafka_producer(settings: KafkaSettings, tuning: dict[str, Any],
                     logger: logging.Logger | None = None) -> Any:
    """A confluent-kafka ``Producer`` (librdkafka: a few microseconds of Python per message).
    ``tuning``: its settings besides the connection, in librdkafka's names; ``logger``
    receives librdkafka's log lines."""
    from confluent_kafka import Producer

    options = {**settings.librdkafka_options(), **tuning}
    if logger is not None:
        options["logger"] = logger
    return Producer(options)


# -- consumers ---------------------------------------------------------------------------------

def group_consumer(settings: KafkaSettings, **options: Any) -> Any:
    """An aiokafka ``AIOKafkaConsumer``: the collector's (``group_id``, ``subscribe`` with a
    listener, ``getmany``, ``commit``) and the reader of the group's commits. ``options``: its
    keyword arguments besides the connection."""
    from aiokafka import AIOKafkaConsumer

    return AIOKafkaConsumer(**settings.python_options(), **options)


def rebalance_listener(on_revoked: Callable[[Any], Any],
                       on_assigned: Callable[[Any], Any]) -> Any:
    """A rebalance listener for :func:`group_consumer`'s ``subscribe`` that awaits
    ``on_revoked(partitions)`` and ``on_assigned(partitions)`` (coroutine functions)."""
    from aiokafka.abc import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            await on_revoked(revoked)

        async def on_partitions_assigned(self, assigned: Any) -> None:
            await on_assigned(assigned)

    return Listener()


def group_partition(topic: str, partition: int) -> Any:
    """A partition as :func:`group_consumer` names it (aiokafka's ``TopicPartition``)."""
    from aiokafka import TopicPartition

    return TopicPartition(topic, partition)


def position_reader(settings: KafkaSettings, tuning: dict[str, Any] | None = None) -> Any:
    """A confluent-kafka ``Consumer`` that never joins a group, for blocking reads of partition
    ends and records near them (``assign``, ``consume``, ``get_watermark_offsets``).
    librdkafka wants a group id even so; the one given, ``streamanon-position-reader``, is
    never joined nor committed to (no ``subscribe``, no commit). ``tuning``: its settings
    besides the connection, in librdkafka's names."""
    from confluent_kafka import Consumer

    return Consumer({**settings.librdkafka_options(), "group.id": "streamanon-position-reader",
                     "enable.auto.commit": False, "enable.auto.offset.store": False,
                     **(tuning or {}), "logger": logging.getLogger(LIBRDKAFKA_CLIENTS_LOGGER)})


def reader_partition(topic: str, partition: int, offset: int | None = None) -> Any:
    """A partition as :func:`position_reader` names it (confluent-kafka's ``TopicPartition``),
    with the offset to read from when given (:data:`None`: none; see
    :func:`reader_beginning`)."""
    from confluent_kafka import TopicPartition

    if offset is None:
        return TopicPartition(topic, partition)
    return TopicPartition(topic, partition, offset)


def reader_beginning(topic: str, partition: int) -> Any:
    """A partition for :func:`position_reader`'s ``assign``, read from its first offset."""
    from confluent_kafka import OFFSET_BEGINNING

    return reader_partition(topic, partition, OFFSET_BEGINNING)
