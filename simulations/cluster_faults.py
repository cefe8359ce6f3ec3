"""The cluster's faults: a three-node Apache Kafka cluster loses a broker while a survey runs,
and every acknowledged response is still released exactly once.

    python -m simulations.cluster_faults                     # every scenario, three times
    python -m simulations.cluster_faults --repeat 1 --n 600  # a quick look (what the test runs)

Three KRaft nodes on loopback (``simulations/apache_kafka.py``: each broker and controller,
every topic replicated three times, ``min.insync.replicas = 2``), one ``streamanon serve``
process on them (SQLite store; its producers idempotent with ``acks=all``; the topics it
makes with ``replication_factor = 3``), and a librdkafka client that plays the platform: it
sends the responses (idempotent, ``acks=all``) and reads the release back. Each scenario has
a survey of its own:

a  the leader of the responses topic's partition 0 is SIGKILLed mid-ingest (half of the
   responses still to send), then started again once the survey has stored the rest;
b  the leader of the release topic is SIGKILLed mid-publish (the service held with SIGSTOP
   when the first release record is on the topic), then started again after the release;
c  node 2 is stopped (SIGTERM, a controlled shutdown) during the base run (the service's
   compute process held with SIGSTOP from the request until the node is down, so that the run
   cannot end first); the late responses, the close and the release happen without it; it is
   started again after the release;
d  a rolling restart while the survey is open and the responses arrive (nine tenths in bursts
   every 2 s through it, the last tenth after it): each node in turn stopped (SIGTERM),
   started again, and waited for until it is back in the cluster.

Then the survey is closed (b: before the fault) and its release read back from the release
topic (the records before the last manifest) and from the release file. Reported per
scenario and run: responses sent, acknowledged by the cluster, released, duplicated
(released more than once), lost (acknowledged and not released), the time to recover (a:
from the kill until the survey stored again; b: from the kill until the release was
complete; c: from the close, with a node down, until the release; a and d: from the kill,
or the last node's return, until every acknowledged response was stored, the rest of them
being sent meanwhile) and the service's health throughout: ``/livez``,
``/healthz`` and ``/api/status`` polled every half second, each answer counted. The exit
status is 1 when a run lost or duplicated a response, did not release, or the service's
status stopped answering.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from simulations.apache_kafka import ApacheKafka
from simulations.apache_kafka import version as kafka_version
from simulations.common import machine
from simulations.faults import (
    Outcome,
    ScenarioFailed,
    ServiceRig,
    SlowSender,
    checked,
    children,
    close_over_http,
    first_half_stored,
    held_mid_publish,
    responses,
    send,
    settled,
    wait_released,
    wait_until,
)

SCENARIOS = {
    "a": "leader of the responses partition killed mid-ingest",
    "b": "leader of the release topic killed mid-publish",
    "c": "one broker stopped during the base run, back after the close",
    "d": "rolling restart of all three while the survey is open",
}
#: How long the platform's producer keeps a response it could not deliver yet: longer than a
#: leader election (the brokers' session is 6 s), as a platform's outbox would.
PLATFORM_TIMEOUT_MS = 60_000


@dataclass(kw_only=True)
class ClusterRig(ServiceRig):
    cluster: ApacheKafka

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def store_url(self) -> str:
        return f"sqlite:///{self.workdir / 'streamanon.db'}"

    def kafka_extra(self) -> str:
        return "replication_factor = 3\n"

    def responses_topic(self, sid: str) -> str:
        topic = self.topic(sid, "responses")
        from streamanon.service.broker import ensure_topics

        ensure_topics(self.bootstrap, {topic: 2}, replicas=3)  # as the platform makes it
        return topic


@dataclass
class Health:
    """``/livez``, ``/healthz`` and ``/api/status`` polled every half second while a scenario
    runs: how many polls, and how many of each answered 200."""

    port: int
    polls: int = 0
    ok: collections.Counter = field(default_factory=collections.Counter)
    halt: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Health:
        self.thread = threading.Thread(target=self._run, daemon=True, name="health-poll")
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        self.thread.join(10)

    def _run(self) -> None:
        while not self.halt.wait(0.5):
            self.polls += 1
            for path in ("/livez", "/healthz", "/api/status"):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                                timeout=5) as r:
                        self.ok[path] += r.status == 200
                except (OSError, urllib.error.HTTPError):
                    pass

    def describe(self) -> str:
        return ", ".join(f"{path} {self.ok[path]}/{self.polls}"
                         for path in ("/livez", "/healthz", "/api/status"))


@dataclass
class ClusterOutcome(Outcome):
    attempted: int = 0
    health: str = ""
    status_answered: bool = True


def all_stored(rig: ClusterRig, sid: str, sender: SlowSender, after: float) -> float:
    """Seconds from ``after`` until the survey stored every response the cluster
    acknowledged (the sender done)."""
    sender.join(PLATFORM_TIMEOUT_MS / 1000 + 60)
    wait_until(lambda: rig.stored(sid) >= len(sender.acked), 120,
               "every acknowledged response stored", rig, step=0.1)
    return time.monotonic() - after


def leader_killed_mid_ingest(rig: ClusterRig, sid: str, n: int, out: ClusterOutcome
                             ) -> set[bytes]:
    rig.responses_topic(sid)
    sender = first_half_stored(rig, sid, responses(sid, n), timeout_ms=PLATFORM_TIMEOUT_MS,
                               idempotent=True, pause=0.3)
    leader = rig.cluster.leader(rig.topic(sid, "responses"), 0)
    at_kill = rig.stored(sid)
    rig.cluster.kill(leader)
    killed = time.monotonic()
    sender.go.set()  # the second half is sent while partition 0 has no leader
    if at_kill >= n:
        raise ScenarioFailed("every response was stored before the kill: not mid-ingest")
    out.recover = all_stored(rig, sid, sender, killed)
    out.notes.append(f"node {leader} killed with {at_kill} of {n} stored")
    rig.cluster.start_node(leader)
    close_over_http(rig, sid)
    wait_released(rig, sid, timeout=180)
    return sender.acked


def release_leader_killed_mid_publish(rig: ClusterRig, sid: str, n: int, out: ClusterOutcome
                                      ) -> set[bytes]:
    topic = rig.responses_topic(sid)
    sent = send(rig.bootstrap, topic, responses(sid, n), idempotent=True)
    wait_until(lambda: rig.stored(sid) >= len(sent), 60, f"{len(sent)} responses stored", rig)
    close_over_http(rig, sid)
    with held_mid_publish(rig, sid, n) as on_topic:
        leader = rig.cluster.leader(rig.topic(sid, "release"), 0)
        rig.cluster.kill(leader)
        killed = time.monotonic()
    out.notes.append(f"node {leader} killed with {on_topic} of {n + 1} release messages on "
                     "the topic")
    out.recover = wait_released(rig, sid, timeout=180) - killed
    rig.cluster.start_node(leader)
    return sent


def broker_down_during_base_run(rig: ClusterRig, sid: str, n: int, out: ClusterOutcome
                                ) -> set[bytes]:
    topic = rig.responses_topic(sid)
    messages = responses(sid, n)
    early, late = messages[: n * 9 // 10], messages[n * 9 // 10:]
    sent = send(rig.bootstrap, topic, early, idempotent=True)
    wait_until(lambda: rig.stored(sid) >= len(sent), 60, "the early responses stored", rig)
    assert rig.proc is not None
    compute = children(rig.proc.pid)  # the compute pool, held so the base run cannot end
    for pid in compute:
        os.kill(pid, signal.SIGSTOP)
    try:
        code, _ = rig.post(f"/api/surveys/{sid}/base")
        if code != 202:
            raise ScenarioFailed(f"the base run was answered {code}, not 202")
        wait_until(lambda: rig.state(sid)[0] == "BASE_RUNNING", 30, "the base run started",
                   rig)
        down = 2
        rig.cluster.stop_node(down)
        out.notes.append(f"node {down} stopped in state {rig.state(sid)[0]}")
    finally:
        for pid in compute:
            os.kill(pid, signal.SIGCONT)
    wait_until(lambda: rig.state(sid)[0] == "BASE_DONE", 120, "the base run done", rig)
    sent |= send(rig.bootstrap, topic, late, idempotent=True)
    wait_until(lambda: rig.stored(sid) >= len(sent), 60, "the late responses stored", rig)
    closed = time.monotonic()
    close_over_http(rig, sid)
    out.recover = wait_released(rig, sid, timeout=180) - closed
    rig.cluster.start_node(down)
    return sent


def rolling_restart(rig: ClusterRig, sid: str, n: int, out: ClusterOutcome) -> set[bytes]:
    topic = rig.responses_topic(sid)
    # nine tenths sent in bursts every 2 s through the restart, the last tenth after it
    sender = SlowSender(rig.bootstrap, topic, responses(sid, n), hold_after=n * 9 // 10,
                        timeout_ms=PLATFORM_TIMEOUT_MS, idempotent=True, pause=2.0)
    sender.start()
    try:
        for node in rig.cluster.nodes:
            rig.cluster.stop_node(node.node_id)
            rig.cluster.start_node(node.node_id)
        out.notes.append(f"{rig.stored(sid)} of {n} stored when the last node was back")
    finally:
        back = time.monotonic()
        sender.go.set()
    out.recover = all_stored(rig, sid, sender, back)
    close_over_http(rig, sid)
    wait_released(rig, sid, timeout=180)
    return sender.acked


RUN: dict[str, Callable[[ClusterRig, str, int, ClusterOutcome], set[bytes]]] = {
    "a": leader_killed_mid_ingest, "b": release_leader_killed_mid_publish,
    "c": broker_down_during_base_run, "d": rolling_restart,
}


def run_scenario(rig: ClusterRig, letter: str, n: int) -> ClusterOutcome:
    out = ClusterOutcome(f"{letter}: {SCENARIOS[letter]}", attempted=n)
    sid = letter
    log_start = rig.log.stat().st_size if rig.log.exists() else 0
    with Health(rig.port) as health:
        try:
            checked(rig, RUN[letter], sid, n, out)
        finally:
            for node in rig.cluster.nodes:  # a failed scenario may have left one down
                if not node.alive():
                    rig.cluster.start_node(node.node_id)
    out.health = health.describe()
    out.status_answered = health.ok["/api/status"] == health.polls
    if out.failure is None and not out.status_answered:
        out.failure = f"/api/status did not always answer: {out.health}"
    settled(rig, out, log_start)
    return out


def run_once(letters: list[str], n: int, workdir: Path) -> list[ClusterOutcome]:
    """One cluster, one service, the scenarios in turn."""
    with ApacheKafka(nodes_wanted=3) as cluster:
        rig = ClusterRig(cluster=cluster, workdir=workdir, surveys=letters)
        try:
            rig.start_service()
            outcomes = []
            for letter in letters:
                started = time.monotonic()
                outcomes.append(run_scenario(rig, letter, n))
                o = outcomes[-1]
                print(f"{o.scenario}: {'ok' if o.ok else 'FAILED'} in "
                      f"{time.monotonic() - started:.1f} s ({'; '.join(o.notes)}; "
                      f"{o.health})", file=sys.stderr, flush=True)
                if not rig.alive():
                    raise ScenarioFailed(f"the service exited:\n{rig.log_tail()}")
            return outcomes
        finally:
            rig.stop_service()


def table(outcomes: list[ClusterOutcome]) -> str:
    head = ["scenario", "run", "sent", "acknowledged", "released", "duplicates", "lost",
            "recovery (s)", "health: /livez, /healthz, /api/status 200 of polls"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * 6 + "---|"]
    runs: collections.Counter = collections.Counter()
    for o in outcomes:
        runs[o.scenario] += 1
        recover = "failed" if o.failure or o.recover is None else f"{o.recover:.1f}"
        lines.append(f"| {o.scenario} | {runs[o.scenario]} | {o.attempted:,} | {o.sent:,} | "
                     f"{o.released:,} | {o.duplicated:,} | {o.lost:,} | {recover} | "
                     f"{o.health} |")
    return "\n".join(lines)


def medians(outcomes: list[ClusterOutcome]) -> str:
    by: dict[str, list[float]] = collections.defaultdict(list)
    for o in outcomes:
        if o.recover is not None and o.failure is None:
            by[o.scenario].append(o.recover)
    return "\n".join(f"- {name}: median recovery {statistics.median(values):.1f} s "
                     f"({len(values)} runs)" for name, values in by.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.cluster_faults", description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2000,
                        help="responses per scenario (default 2000; at least 100)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of the whole suite, each on a new cluster (default 3)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated letters (default {','.join(SCENARIOS)})")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    letters = list(dict.fromkeys(s.strip() for s in args.scenarios.split(",") if s.strip()))
    unknown = [s for s in letters if s not in SCENARIOS]
    if unknown or not letters:
        parser.error(f"--scenarios: unknown {unknown or 'none given'}; letters of "
                     f"{','.join(SCENARIOS)}")
    if args.n < 100 or args.repeat < 1:
        parser.error("--n: at least 100 responses; --repeat: at least 1")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    outcomes: list[ClusterOutcome] = []
    for run in range(args.repeat):
        print(f"run {run + 1} of {args.repeat}: a new three-node cluster", file=sys.stderr,
              flush=True)
        with tempfile.TemporaryDirectory(prefix="cluster-faults-") as tmp:
            try:
                outcomes += run_once(letters, args.n, Path(tmp))
            except ScenarioFailed as exc:
                print(f"run {run + 1} stopped: {exc}", file=sys.stderr)
                return 1
    print(f"Cluster faults: Apache Kafka {kafka_version()}, three KRaft nodes on loopback "
          f"(replication 3, min.insync.replicas 2), {args.n:,} responses per scenario, "
          f"{args.repeat} run(s); {started}; {machine()}; command: python -m "
          f"simulations.cluster_faults --n {args.n} --repeat {args.repeat}"
          + (f" --scenarios {args.scenarios}" if args.scenarios != ",".join(SCENARIOS)
             else "") + "\n")
    print(table(outcomes))
    print("\n" + medians(outcomes))
    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        print(f"\n{o.scenario}: {o.failure}")
    if args.out is not None:
        args.out.write_text(json.dumps([o.__dict__ for o in outcomes], indent=2, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
