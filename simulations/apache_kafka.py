"""Apache Kafka on loopback, for the tests and the benchmarks: one KRaft broker, or a cluster.

    python -m simulations.apache_kafka fetch            # the pinned broker's jars, once
    python -m simulations.apache_kafka run              # one broker; prints its bootstrap
    python -m simulations.apache_kafka run --nodes 3    # three, replicated (Ctrl-C stops)

The broker comes from Maven Central: ``deploy/kafka/pom.xml`` pins ``org.apache.kafka:kafka_2.13``
and its logging, and ``fetch`` copies the jars into ``.cache/apache-kafka-VERSION/`` (Maven's
``dependency:copy-dependencies``; later runs reuse the folder, and Maven's own cache makes a
fresh clone's fetch a matter of seconds). It needs ``mvn`` and a Java 17 ``java`` on the PATH
(``JAVA_HOME`` is honoured). ``make test`` fetches before the tests start, so that no two test
workers run Maven at once.

Each node is a KRaft process in combined mode (broker and controller, as Kafka's quickstart
runs it), with a small heap, in a private temporary directory: its ``server.properties``, its
data and its ``server.log`` (which :class:`BrokerStartError` quotes when a node does not come
up). A cluster of three is the shape operators run: every node a voter, topics replicated
three times with ``min.insync.replicas = 2``. Clients reach each node on its own ``CLIENT``
listener: plain text, or SASL_SSL with SCRAM-SHA-512 and a TLS certificate (:class:`Security`);
the nodes talk to each other on a plain-text ``INTERNAL`` listener and to the controllers on
``CONTROLLER``. A node can be killed (SIGKILL), stopped (SIGTERM, a controlled shutdown) and
started again on the same ports and data, which is what the cluster's fault suite does
(``simulations/cluster_faults.py``).

It lives here, not under ``tests/``, because the benchmarks may not import ``tests`` (the tests
may import ``simulations``), like the PostgreSQL server beside it.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from streamanon.service.broker import BrokerError, free_port

REPO = Path(__file__).resolve().parents[1]
POM = REPO / "deploy" / "kafka" / "pom.xml"
#: The heap of each node: the tests' topics are small, and a cluster of three runs beside the
#: service and the test workers on two cores.
HEAP = "256m"


def version() -> str:
    """The broker's version pinned in ``deploy/kafka/pom.xml``."""
    found = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    if not found:
        raise BrokerError(f"{POM} pins no <kafka.version>")
    return found.group(1)


def cache_dir() -> Path:
    """Where the jars are kept: ``STREAMANON_KAFKA_LIBS`` when set, else
    ``.cache/apache-kafka-VERSION`` in the checkout."""
    given = os.environ.get("STREAMANON_KAFKA_LIBS")
    return Path(given) if given else REPO / ".cache" / f"apache-kafka-{version()}"


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerError("Apache Kafka needs Java 17 or later: no `java` on the PATH (nor "
                          "JAVA_HOME); on Debian: apt-get install openjdk-17-jre-headless")
    return java


def fetch(quiet: bool = False) -> Path:
    """The folder of the pinned broker's jars, copied from Maven Central the first time (a
    stamp file marks a complete copy, so an interrupted fetch is done again)."""
    libs = cache_dir()
    stamp = libs / ".complete"
    if stamp.exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("fetching Apache Kafka needs Maven (`mvn`) on the PATH; on Debian: "
                          "apt-get install maven (or set STREAMANON_KAFKA_LIBS to a folder "
                          "holding the broker's jars)")
    if not quiet:
        print(f"[apache-kafka] fetching Apache Kafka {version()} from Maven Central into "
              f"{libs} (seconds to a minute, once)", file=sys.stderr, flush=True)
    shutil.rmtree(libs, ignore_errors=True)
    run = subprocess.run(
        [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
         "-DincludeScope=runtime", f"-DoutputDirectory={libs}"],
        capture_output=True, text=True)
    if run.returncode != 0 or not any(libs.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"Maven could not fetch Apache Kafka {version()} (exit status "
                          f"{run.returncode}): {(run.stdout + run.stderr)[-2000:]}")
    stamp.write_text(version() + "\n")
    return libs


class BrokerStartError(BrokerError):
    """A node did not come up; the message ends with the tail of its log."""


@dataclass(frozen=True)
class Security:
    """SASL_SSL on the clients' listener: SCRAM-SHA-512 users (name -> password) created when
    the nodes are formatted, the server's key and certificate chain in one PEM file (the key in
    PKCS #8, unencrypted: Kafka's PEM key store reads no other), and the CA file the clients
    trust."""

    pem: Path
    cafile: Path
    users: dict[str, str]
    mechanism: str = "SCRAM-SHA-512"


@dataclass
class Node:
    node_id: int
    client_port: int
    internal_port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        out = self.directory / "stdout.log"
        texts = [p.read_text(errors="replace") for p in (self.log, out) if p.exists()]
        return "\n".join("\n".join(t.splitlines()[-lines:]) for t in texts if t) or "no output"


_LOG4J = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka.request.logger
logger.kafka.level = WARN
"""


@dataclass
class ApacheKafka:
    """``with ApacheKafka(nodes=3) as cluster: cluster.bootstrap``: ``nodes`` KRaft nodes on
    free loopback ports; :meth:`kill`, :meth:`stop_node` and :meth:`start_node` take one away and
    bring it back."""

    nodes_wanted: int = 1
    security: Security | None = None
    #: more broker settings (``server.properties`` keys), e.g. ``message.max.bytes``
    settings: dict[str, str] = field(default_factory=dict)
    startup_timeout: float = 90.0
    nodes: list[Node] = field(default_factory=list)
    root: Path | None = None

    # -- addresses --------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    # -- the life of the cluster ------------------------------------------------------------
    def __enter__(self) -> ApacheKafka:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        libs = fetch()
        self.root = Path(tempfile.mkdtemp(prefix="apache-kafka-"))
        ports = [(free_port(), free_port(), free_port()) for _ in range(self.nodes_wanted)]
        self.nodes = [Node(i + 1, *ports[i], self.root / f"node-{i + 1}")
                      for i in range(self.nodes_wanted)]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        try:
            for node in self.nodes:
                node.directory.mkdir(parents=True)
                self._configure(node)
                self._format(node, libs, cluster_id)
            for node in self.nodes:
                self._launch(node, libs)
            self.wait_ready()
        except BaseException:  # Ctrl-C too: never leave a node running
            self.stop()
            raise
        return self.bootstrap

    def stop(self) -> None:
        for node in self.nodes:
            self._end(node, signal.SIGKILL)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash: no controlled shutdown, its leaderships moved by the
        controllers once its session times out)."""
        self._end(self.node(node_id), signal.SIGKILL)

    def stop_node(self, node_id: int, timeout: float = 60.0) -> None:
        """SIGTERM one node and wait for its controlled shutdown (leaderships handed over)."""
        self._end(self.node(node_id), signal.SIGTERM, timeout)

    def start_node(self, node_id: int) -> None:
        """Start a stopped node again on its ports and data, and wait until it is back in the
        cluster's metadata."""
        node = self.node(node_id)
        if node.alive():
            return
        self._launch(node, fetch())
        self.wait_ready()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every running node is registered (in the metadata a client reads) and
        answers; a node that exits, or the time running out, raises with the log's tail."""
        from confluent_kafka.admin import AdminClient

        running = [n for n in self.nodes if n.alive()]
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        config = {"bootstrap.servers": ",".join(n.address for n in running),
                  **self.client_options(), "log_level": 0}
        while True:
            for node in running:
                if not node.alive():
                    status = node.process.returncode if node.process else "?"
                    raise BrokerStartError(f"Apache Kafka node {node.node_id} exited with "
                                           f"status {status}:\n{node.log_tail()}")
            try:
                brokers = AdminClient(config).list_topics(timeout=2).brokers
                if {n.node_id for n in running} <= set(brokers):
                    return
            except Exception:  # a KafkaException while the nodes come up
                pass
            if time.monotonic() > deadline:
                tails = "\n".join(f"-- node {n.node_id}:\n{n.log_tail()}" for n in running)
                raise BrokerStartError(f"Apache Kafka did not come up within "
                                       f"{timeout or self.startup_timeout:.0f} s:\n{tails}")
            time.sleep(0.3)

    def client_options(self) -> dict[str, str]:
        """librdkafka's settings for this cluster's clients' listener (the first user)."""
        if self.security is None:
            return {}
        user, password = next(iter(self.security.users.items()))
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": self.security.mechanism,
                "sasl.username": user, "sasl.password": password,
                "ssl.ca.location": str(self.security.cafile)}

    def leader(self, topic: str, partition: int = 0) -> int:
        """The node that leads ``topic``'s ``partition`` now (-1 when none does)."""
        from confluent_kafka.admin import AdminClient

        running = [n.address for n in self.nodes if n.alive()]
        meta = AdminClient({"bootstrap.servers": ",".join(running), **self.client_options()}
                           ).list_topics(topic, timeout=10)
        return meta.topics[topic].partitions[partition].leader

    def limit_produce(self, client_id: str, bytes_per_second: int | None) -> None:
        """Throttle the producers whose ``client.id`` is ``client_id`` to ``bytes_per_second``
        (a client quota: the brokers hold back their answers so that the rate is kept), or lift
        the limit (None). With it a test sees a publish in its middle however its steps are
        scheduled."""
        change = (["--delete-config", "producer_byte_rate"] if bytes_per_second is None
                  else ["--add-config", f"producer_byte_rate={int(bytes_per_second)}"])
        if self.security is not None:
            raise BrokerError("limit_produce speaks to a cluster without SASL only")
        run = subprocess.run(
            [_java(), "-cp", f"{fetch()}/*", "kafka.admin.ConfigCommand",
             "--bootstrap-server", self.bootstrap, "--alter", *change,
             "--entity-type", "clients", "--entity-name", client_id],
            capture_output=True, text=True)
        if run.returncode != 0:
            raise BrokerError(f"setting the produce quota of {client_id!r} failed: "
                              f"{(run.stdout + run.stderr)[-2000:]}")

    # -- one node ---------------------------------------------------------------------------
    def _configure(self, node: Node) -> None:
        replicas = min(3, len(self.nodes))
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        client = "SASL_SSL" if self.security else "PLAINTEXT"
        lines = [
            "process.roles=broker,controller",
            f"node.id={node.node_id}",
            f"controller.quorum.voters={voters}",
            f"listeners=CLIENT://127.0.0.1:{node.client_port},"
            f"INTERNAL://127.0.0.1:{node.internal_port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}",
            f"advertised.listeners=CLIENT://127.0.0.1:{node.client_port},"
            f"INTERNAL://127.0.0.1:{node.internal_port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=INTERNAL",
            f"listener.security.protocol.map=CLIENT:{client},INTERNAL:PLAINTEXT,"
            "CONTROLLER:PLAINTEXT",
            f"log.dirs={node.directory / 'data'}",
            f"offsets.topic.replication.factor={replicas}",
            f"transaction.state.log.replication.factor={replicas}",
            f"transaction.state.log.min.isr={min(2, replicas)}",
            f"default.replication.factor={replicas}",
            f"min.insync.replicas={min(2, replicas)}",
            "offsets.topic.num.partitions=4",
            "group.initial.rebalance.delay.ms=0",
            "num.partitions=1",
            "auto.create.topics.enable=true",
            # a crashed node's leaderships move within seconds (the defaults are 9 s and 2 s)
            "broker.session.timeout.ms=6000",
            "broker.heartbeat.interval.ms=1000",
            "log.flush.interval.messages=9223372036854775807",
        ]
        if self.security is not None:
            mech = self.security.mechanism
            lines += [
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={self.security.pem}",
                f"listener.name.client.sasl.enabled.mechanisms={mech}",
                f"listener.name.client.{mech.lower()}.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            ]
        lines += [f"{key}={value}" for key, value in self.settings.items()]
        (node.directory / "server.properties").write_text("\n".join(lines) + "\n")
        (node.directory / "log4j2.properties").write_text(_LOG4J.format(log=node.log))

    def _format(self, node: Node, libs: Path, cluster_id: str) -> None:
        # --cluster-id=ID, one word: an id may start with "-" (one in 64), which the tool
        # would take for an option if it were the next argument
        command = [_java(), "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format",
                   f"--cluster-id={cluster_id}", "-c", str(node.directory / "server.properties")]
        for user, password in (self.security.users.items() if self.security else ()):
            command += ["--add-scram",
                        f"{self.security.mechanism}=[name={user},password={password}]"]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            raise BrokerStartError(f"formatting Apache Kafka node {node.node_id} failed: "
                                   f"{(run.stdout + run.stderr)[-2000:]}")

    def _launch(self, node: Node, libs: Path) -> None:
        with open(node.directory / "stdout.log", "ab") as out:
            node.process = subprocess.Popen(
                [_java(), f"-Xmx{HEAP}", f"-Xms{HEAP}", "-XX:+UseSerialGC",
                 "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                 f"-Dlog4j2.configurationFile={node.directory / 'log4j2.properties'}",
                 "-cp", f"{libs}/*", "kafka.Kafka", str(node.directory / "server.properties")],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    @staticmethod
    def _end(node: Node, sig: int, timeout: float = 30.0) -> None:
        if node.process is None or node.process.poll() is not None:
            return
        os.killpg(node.process.pid, sig)
        try:
            node.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.apache_kafka",
        description="Fetch the pinned Apache Kafka broker from Maven Central, or run it on "
                    "loopback (KRaft, in a temporary directory removed at the end).",
        epilog="run --nodes N: N KRaft nodes, each broker and controller (default 1; 3 "
               "replicates every topic three times, min.insync.replicas = 2); the first line "
               "printed is the bootstrap address; Ctrl-C or SIGTERM stops them.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="copy the broker's jars into the cache folder (once)")
    run = sub.add_parser("run", help="run a broker (or a cluster) until Ctrl-C; prints the "
                                     "bootstrap address first")
    run.add_argument("--nodes", type=int, default=1,
                     help="KRaft nodes, each broker and controller (default 1; 3 replicates "
                          "every topic three times, min.insync.replicas = 2)")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch())
            return 0
        # SIGTERM (a supervisor, `timeout`) ends it as Ctrl-C does: the nodes stopped
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with ApacheKafka(args.nodes) as cluster:
            print(cluster.bootstrap, flush=True)
            with suppress(KeyboardInterrupt):
                signal.pause()
    except BrokerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
