"""The cluster's fault suite (simulations/cluster_faults.py) runs as docs/guide/reliability.md
shows its quick look: on three Apache Kafka nodes, every scenario releases each acknowledged
response exactly once while the service's health and status answer throughout; and the
Apache Kafka launcher shows a node's log when the node does not come up."""

from __future__ import annotations

import re
import shlex

import pytest

from simulations import cluster_faults
from simulations.apache_kafka import ApacheKafka, BrokerStartError
from tests.docs_pages import shown_commands


def documented_quick_look() -> list[str]:
    shown = [line for line in shown_commands("guide/reliability.md", "A cluster's faults",
                                             "simulations.cluster_faults")
             if "--repeat 1" in line]
    assert len(shown) == 1, shown
    return shlex.split(shown[0])


def test_help_describes_every_scenario(capsys):
    with pytest.raises(SystemExit):
        cluster_faults.main(["--help"])
    out = capsys.readouterr().out
    for letter in cluster_faults.SCENARIOS:
        assert re.search(rf"^{letter}  ", out, flags=re.M), letter


def test_the_documented_cluster_faults_run(kafka_cluster, subprocesses, capsys):
    words = documented_quick_look()
    assert words[:3] == ["python", "-m", "simulations.cluster_faults"]
    code = cluster_faults.main(words[3:])
    out, err = capsys.readouterr()
    said = f"{out}\n{err[-6000:]}"
    n = int(words[words.index("--n") + 1])
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in out.splitlines()
            if re.match(r"^\| [a-d]: ", line)]
    assert [r[0].split(":")[0] for r in rows] == list(cluster_faults.SCENARIOS), said
    for row in rows:
        sent, acked, released, duplicates, lost = (int(c.replace(",", "")) for c in row[2:7])
        assert (sent, acked, released, duplicates, lost) == (n, n, n, 0, 0), said
        assert float(row[7]) >= 0, said
        for path, answered, polls in re.findall(r"(/\w+) (\d+)/(\d+)", row[8]):
            assert answered == polls and int(polls) > 0, (path, said)
    assert code == 0, said


def test_a_node_that_does_not_start_shows_its_log(kafka_cluster, subprocesses):
    with pytest.raises(BrokerStartError) as failed:
        ApacheKafka(settings={"num.network.threads": "not-a-number"}).start()
    assert "num.network.threads" in str(failed.value)


def test_a_cluster_id_that_starts_with_a_dash_formats(kafka_cluster, subprocesses,
                                                       monkeypatch):
    """One cluster id in 64 starts with "-" (its first base64 digit is 62); given as a
    separate argument, the storage tool took it for an option (a make test run's six errors)."""
    import uuid

    import simulations.apache_kafka

    dashed = uuid.UUID(bytes=b"\xf8" + bytes(15))
    monkeypatch.setattr(simulations.apache_kafka.uuid, "uuid4", lambda: dashed)
    with ApacheKafka() as kafka:
        assert kafka.bootstrap
