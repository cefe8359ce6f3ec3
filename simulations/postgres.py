"""A private PostgreSQL server on loopback for the benchmarks and the tests (Debian's
postgresql package). It lives here, not under ``tests/``, because the benchmarks may not import
``tests`` (the tests may import ``simulations``).

``make test`` installs the package when it is missing. The server runs as the ``postgres``
user when the tests run as root (PostgreSQL refuses to run as root), in a temporary data
directory, on a free port, with trust authentication limited to 127.0.0.1.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from streamanon.service.broker import free_port


def _bindir() -> Path | None:
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(os.path.realpath(pg_ctl)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def why_unavailable() -> str | None:
    if _bindir() is None:
        return "PostgreSQL is not installed (make test installs Debian's postgresql as root)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: cannot start PostgreSQL as another user"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server"
    return None


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server in a fresh directory (outside pytest's root-only tmp tree, which the
    postgres user could not enter); yield its URL; stop it and remove the directory."""
    with controlled_postgres_server() as server:
        yield server.url


@dataclass
class PostgresServer:
    """A running test server that a test can take away and bring back (same data, same port)."""

    url: str
    pg_ctl: list[str]  # the pg_ctl command, as the server's user, with its data directory
    start_options: list[str]

    def stop(self) -> None:
        """Fast shutdown: open sessions are cut, as in a server restart."""
        subprocess.run([*self.pg_ctl, "-m", "fast", "-w", "stop"], check=True,
                       capture_output=True)

    def start(self) -> None:
        subprocess.run([*self.pg_ctl, *self.start_options, "start"], check=True,
                       capture_output=True)

    def running(self) -> bool:
        return subprocess.run([*self.pg_ctl, "status"], capture_output=True).returncode == 0

    def terminate_backends(self) -> int:
        """Cut every other client session (as a failover or an administrator would)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return len(conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'").fetchall())


@contextmanager
def controlled_postgres_server() -> Iterator[PostgresServer]:
    """:func:`postgres_server`, yielding a :class:`PostgresServer`."""
    bindir = _bindir()
    assert bindir is not None
    base = Path(tempfile.mkdtemp(prefix="streamanon-pg-"))
    try:
        with _server(bindir, base) as server:
            yield server
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def _server(bindir: Path, base: Path) -> Iterator[PostgresServer]:
    data = base / "pgdata"
    data.mkdir(parents=True)
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(data, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    run = lambda *cmd: subprocess.run([*as_user, *cmd], check=True,  # noqa: E731
                                      capture_output=True, text=True)
    run(str(bindir / "initdb"), "-D", str(data), "-U", "streamanon", "--auth=trust",
        "--no-sync")
    log = base / "postgres.log"
    if as_user:
        log.touch()
        shutil.chown(log, "postgres")
    server = PostgresServer(
        url=f"postgresql://streamanon@127.0.0.1:{port}/postgres",
        pg_ctl=[*as_user, str(bindir / "pg_ctl"), "-D", str(data)],
        start_options=["-l", str(log), "-w", "-t", "60", "-o",
                       f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off"])
    server.start()
    try:
        yield server
    finally:
        subprocess.run([*server.pg_ctl, "-m", "fast", "-w", "stop"], capture_output=True)
