"""The fault suite (simulations/faults.py) runs as docs/guide/reliability.md shows it, and every
scenario releases each acknowledged response exactly once; its pieces (the cuttable proxy, the
reading of a release) do what they say."""

from __future__ import annotations

import json
import re
import shlex
import socket
import threading
import time

import pytest

from simulations import faults
from simulations.postgres import why_unavailable
from simulations.tcp_proxy import CuttableProxy
from tests.docs_pages import shown_commands


def documented_command() -> list[str]:
    """The one command of the section "The fault suite" of guide/reliability.md."""
    shown = shown_commands("guide/reliability.md", "The fault suite", "simulations.faults")
    assert len(shown) == 1, shown
    return shlex.split(shown[0])


def test_help_describes_every_scenario(capsys):
    with pytest.raises(SystemExit):
        faults.parse_args(["--help"])
    out = capsys.readouterr().out
    for letter in faults.SCENARIOS:
        assert re.search(rf"^{letter}  ", out, flags=re.M), letter
    assert "--scenarios" in out and "--n" in out


@pytest.mark.parametrize("argv", [["--scenarios", "a,z"], ["--scenarios", ","], ["--n", "10"]])
def test_bad_options_are_one_line_errors(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        faults.parse_args(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "python -m simulations.faults: error: --")


class Message:
    """A release topic message as the publisher sends it (key ``<release>:<index>`` or
    ``<release>:manifest``, headers on the manifest only)."""

    def __init__(self, kind: str, release: str = "r1", index: int | None = None,
                 value: dict | None = None) -> None:
        self._key = f"{release}:{'manifest' if kind == 'manifest' else index}".encode()
        self._headers = ([("streamanon-type", b"manifest"),
                          ("streamanon-release", release.encode())]
                         if kind == "manifest" else None)
        self._value = json.dumps(value or {}).encode()

    def key(self):
        return self._key

    def headers(self):
        return self._headers

    def value(self):
        return self._value


def run(count: int, tickets: list[int], release: str = "r1") -> list[Message]:
    return [Message("record", release, i, {"ticket": t}) for i, t in enumerate(tickets)] + \
        [Message("manifest", release, value={"release_id": release, "count": count})]


def test_the_release_taken_is_the_run_before_the_last_manifest():
    messages = run(3, [7, 8]) + run(3, [7, 8, 9], "r2")  # a cut run, then the whole release
    assert faults.taken_release(messages) == [7, 8, 9]


@pytest.mark.parametrize("messages", [run(3, [8, 9]), run(2, [1, 2])[:2], []])
def test_a_manifest_without_its_whole_run_is_no_release(messages):
    with pytest.raises(faults.ScenarioFailed):
        faults.taken_release(messages)


def echo_server() -> tuple[socket.socket, threading.Thread]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(1024):
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def test_the_proxy_holds_what_is_sent_during_a_cut_and_forwards_it_after():
    server, _ = echo_server()
    with server, CuttableProxy(server.getsockname()[1]) as proxy, \
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as client:
        client.sendall(b"before")
        assert client.recv(1024) == b"before"
        proxy.cut()
        time.sleep(0.1)
        client.sendall(b"during")
        client.settimeout(0.5)
        with pytest.raises(TimeoutError):
            client.recv(1024)  # nothing comes back while the link is cut
        proxy.resume()
        client.settimeout(5)
        assert client.recv(1024) == b"during"  # held, not lost


class FakeProducer:
    """confluent-kafka's Producer as the sender uses it, acknowledging at once."""

    def __init__(self) -> None:
        self.produced: list[bytes] = []

    def produce(self, topic, value, key, on_delivery):
        self.produced.append(key)
        on_delivery(None, type("Msg", (), {"key": lambda _self: key})())

    def poll(self, timeout):
        return 0

    def purge(self):
        pass

    def flush(self, timeout):
        return 0


def test_the_sender_holds_the_rest_until_the_fault_is_on(monkeypatch):
    """A mid-ingest scenario must not race the service: however fast the service stores, the
    responses after the first ``hold_after`` wait until the scenario has made its fault (a
    loaded service that stored all 2,000 in one batch made scenario f fail as "not mid-ingest")."""
    fake = FakeProducer()
    monkeypatch.setattr(faults, "producer", lambda *args, **kwargs: fake)
    messages = [(b"%d" % i, b"{}") for i in range(100)]
    sender = faults.SlowSender("bootstrap", "topic", messages, hold_after=50)
    sender.start()
    deadline = time.monotonic() + 10
    while len(fake.produced) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # more than two bursts' pause: nothing past the hold
    assert len(fake.produced) == 50
    sender.go.set()
    sender.join(10)
    assert not sender.is_alive()
    assert fake.produced == [key for key, _ in messages]
    assert sender.acked == {key for key, _ in messages}


@pytest.mark.parametrize("hold_after", [0, 100, 150, -1])
def test_a_hold_that_leaves_nothing_on_one_side_is_refused(hold_after):
    messages = [(b"%d" % i, b"{}") for i in range(100)]
    with pytest.raises(ValueError, match="both sides"):
        faults.SlowSender("bootstrap", "topic", messages, hold_after=hold_after)


def test_the_proxy_closes_a_connection_to_a_server_that_is_down():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.close()
    with CuttableProxy(port) as proxy, \
            socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as client:
        assert client.recv(1024) == b""


@pytest.mark.kafka
@pytest.mark.postgres
def test_the_documented_fault_suite_runs(subprocesses, capsys):
    """``python -m simulations.faults`` as guide/reliability.md shows it: every scenario
    released each acknowledged response once (the table's rows), and exits 0."""
    if why_unavailable():  # `make test` installs Debian's postgresql; never skip silently
        pytest.fail(f"PostgreSQL is needed: {why_unavailable()}")
    words = documented_command()
    assert words[:3] == ["python", "-m", "simulations.faults"]
    code = faults.main(words[3:])
    out, err = capsys.readouterr()
    said = f"{out}\n{err[-6000:]}"  # the table, then how each scenario went (a log on failure)
    n = int(faults.parse_args(words[3:]).n)
    rows = [line.split("|")[1:-1] for line in out.splitlines()
            if re.match(r"^\| [a-f]: ", line)]
    assert [r[0].strip().split(":")[0] for r in rows] == list(faults.SCENARIOS), said
    for row in rows:
        sent, stored, released, lost, duplicated = (int(c.replace(",", "")) for c in row[1:6])
        assert (sent, stored, released, lost, duplicated) == (n, n, n, 0, 0), said
        assert float(row[6]) >= 0
    assert code == 0, said
