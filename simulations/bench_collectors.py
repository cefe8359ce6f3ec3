"""Several collectors: ingest with one and with two service instances sharing one PostgreSQL.

    python -m simulations.bench_collectors                       # 100,000 records, 3 repeats
    python -m simulations.bench_collectors --n 20000 --repeat 1  # a quick look

Against the embedded broker (Tansu) and a PostgreSQL server (``--store-url``, else a private
one started as the tests start theirs, ``simulations/postgres.py``), all on the same cores.
For each number of instances (1, then 2) and each repeat: a fresh database and fresh topics (4
partitions), a backlog of ``--n`` responses of 17 fields (15 float quasi-identifiers, a
respondent id, one int confidential answer) produced before the instances start, then that
many ``streamanon serve`` processes started together (one consumer group, one store: each
collects the partitions the group gives it; one holds the lifecycle lease). The rate is the
records stored from the first stored one until all ``--n`` are, read from the store every
0.25 s. Reported per run: records/s, and the cores each part kept busy over that window
(each service with its ingest worker, the broker, the PostgreSQL server, the rest of the
machine). Medians over ``--repeat`` runs; the ratio is two instances' median over one's.

Target (issue 19): two collectors ingest at least 1.6 times one collector's rate where the
cores allow, or the bottleneck measured and named. The CPU columns name it: on a machine whose
cores are all busy, a second collector only shares them.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import numpy as np

from simulations.bench_service import M, responses, send
from simulations.common import cpu_seconds, machine_busy_seconds
from streamanon.service.broker import EmbeddedBroker, ensure_topics, free_port

REPO = Path(__file__).resolve().parents[1]




def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (a service's ingest worker and compute process)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return out


def postgres_pids() -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/comm"):
        with suppress(OSError):
            if stat.read_text().strip() == "postgres":
                found.append(int(stat.parent.name))
    return found


def config_text(bootstrap: str, url: str, prefix: str, workdir: Path, port: int) -> str:
    fields = "\n".join(f'q{j} = {{ role = "quasi_identifier", type = "float" }}'
                       for j in range(M))
    return f"""
[kafka]
bootstrap_servers = "{bootstrap}"
topic_prefix = "{prefix}"
group_id = "{prefix}-collector"
partitions = 4

[store]
url = "{url}"

[output]
directory = "{workdir / 'out'}"

[http]
bind = "127.0.0.1:{port}"

[planner]
interval_seconds = 3600
cost_models = "{workdir / 'models.json'}"

[[surveys]]
id = "s"
k = 10
close = "on-command"

[surveys.schema]
respondent_id = {{ role = "identifier" }}
{fields}
answer = {{ role = "confidential", type = "int" }}
"""


def fresh_database(url: str) -> str:
    """A new database on the server of ``url``; its URL."""
    from urllib.parse import urlparse

    import psycopg

    name = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return urlparse(url)._replace(path=f"/{name}").geturl()


def stored(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        try:
            return int(conn.execute("SELECT COUNT(*) FROM records").fetchone()[0])
        except psycopg.errors.UndefinedTable:
            return 0


def status_when_ready(port: int, proc: subprocess.Popen, deadline: float) -> dict[str, Any]:
    """An instance's ``/api/status``, waiting for its HTTP server to come up: a small backlog can
    be stored before every instance is serving. Raises if the instance exits, answers with an
    HTTP error, or ``deadline`` (``time.monotonic()``) passes first."""
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status",
                                        timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError:
            raise  # it is serving, and said no
        except OSError as exc:
            if proc.poll() is not None:
                raise RuntimeError(f"the instance on port {port} exited "
                                   f"(code {proc.returncode}) before it answered") from exc
            if time.monotonic() > deadline:
                raise RuntimeError(f"the instance on port {port} did not answer: {exc}") from exc
            time.sleep(0.2)


def one_run(instances: int, n: int, bootstrap: str, broker_pid: int, server_url: str,
            workdir: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    url = fresh_database(server_url)
    prefix = f"c{secrets.token_hex(3)}"
    topic = f"{prefix}.s.responses"
    ensure_topics(bootstrap, {topic: 4})
    X = np.random.default_rng(instances).standard_normal((n, M))
    send(bootstrap, topic, responses(X))
    procs: list[subprocess.Popen] = []
    ports = []
    try:
        for i in range(instances):
            ports.append(free_port())
            path = workdir / f"{prefix}-{i}.toml"
            path.write_text(config_text(bootstrap, url, prefix, workdir, ports[-1]))
            log = open(workdir / f"{prefix}-{i}.log", "wb")  # noqa: SIM115 - the child's
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "streamanon", "serve", "--config", str(path)],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO))
        deadline = time.monotonic() + timeout
        while (count := stored(url)) == 0:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "\n".join((workdir / f"{prefix}-{i}.log").read_text()[-2000:]
                                  for i in range(instances))
                raise RuntimeError(f"nothing stored:\n{logs}")
            time.sleep(0.05)
        pids = {f"service {i + 1} (with its worker)": descendants(p.pid)
                for i, p in enumerate(procs)}
        pids |= {"broker (Tansu)": [broker_pid], "PostgreSQL": postgres_pids()}

        def cpu() -> dict[str, float]:
            ours = {name: sum(map(cpu_seconds, group)) for name, group in pids.items()}
            return ours | {"everything else": machine_busy_seconds() - sum(ours.values())}

        first, started, cpu0 = count, time.monotonic(), cpu()
        while count < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} of {n} stored in {timeout:.0f} s; see {workdir}")
            time.sleep(0.25)
            count = stored(url)
        seconds = time.monotonic() - started
        cpu1 = cpu()
        seconds = max(seconds, 1e-9)
        started_by = max(deadline, time.monotonic() + 120)  # a start of its own, at least
        shares = [status_when_ready(port, proc, started_by)["surveys"][0]["stored_here"]
                  for port, proc in zip(ports, procs, strict=True)]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
    return {"instances": instances, "n": n, "seconds": seconds,
            # nan when the whole backlog came in the first batch (too small to measure)
            "rate": (n - first) / seconds if first < n else float("nan"),
            "cores": {k: (cpu1[k] - cpu0[k]) / seconds for k in cpu1},
            "stored_by_instance": shares}


def table(runs: list[dict[str, Any]]) -> str:
    by = {k: [r for r in runs if r["instances"] == k] for k in sorted({r["instances"]
                                                                       for r in runs})}
    parts = sorted({name for r in runs for name in r["cores"]},
                   key=lambda s: (not s.startswith("service"), s))
    head = ["instances", "records/s (median)", "ratio to one", "stored by each"] + \
        [f"cores: {p}" for p in parts]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    base = statistics.median(r["rate"] for r in by[min(by)])
    for k, group in by.items():
        rate = statistics.median(r["rate"] for r in group)
        ratio = rate / base if base > 0 else float("nan")
        cores = [statistics.median(r["cores"].get(p, 0.0) for r in group) if
                 any(p in r["cores"] for r in group) else None for p in parts]
        shares = " / ".join(str(s) for s in group[len(group) // 2]["stored_by_instance"])
        lines.append("| " + " | ".join(
            [str(k), f"{rate:,.0f}", f"{ratio:.2f}", shares]
            + ["" if c is None else f"{c:.2f}" for c in cores]) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="records per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per number of instances")
    parser.add_argument("--instances", type=int, nargs="+", default=[1, 2],
                        help="numbers of instances to compare (the first is the baseline)")
    parser.add_argument("--store-url", default=None,
                        help="a PostgreSQL server (a database is created per run); default: "
                             "a private server, as the tests start one")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run, at most")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = []
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="bench-collectors-") as tmp:
        if args.store_url is None:
            from simulations.postgres import postgres_server

            server_url = stack.enter_context(postgres_server())
        else:
            server_url = args.store_url
        broker = stack.enter_context(EmbeddedBroker())
        assert broker.process is not None
        workdir = Path(tmp)
        env = {**os.environ, "STREAMANON_HMAC_KEY": secrets.token_hex(32),
               "STREAMANON_HTTP_TOKEN": secrets.token_hex(32),
               "STREAMANON_DATA_DIR": str(workdir / "data")}
        for _ in range(args.repeat):
            for k in args.instances:
                runs.append(one_run(k, args.n, broker.bootstrap, broker.process.pid,
                                    server_url, workdir, env, args.timeout))
                print(f"{k} instance(s): {runs[-1]['rate']:,.0f} records/s", file=sys.stderr)
    print(f"Ingest of {args.n:,} records (a backlog), medians of {args.repeat} run(s); "
          f"{os.cpu_count()} cores shared by everything:\n")
    print(table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
