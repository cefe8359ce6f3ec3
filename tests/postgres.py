"""A private PostgreSQL server on loopback for the tests (Debian's postgresql package).

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
from pathlib import Path

from streamanon.broker import free_port


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
    bindir = _bindir()
    assert bindir is not None
    base = Path(tempfile.mkdtemp(prefix="streamanon-pg-"))
    try:
        with _server(bindir, base) as url:
            yield url
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def _server(bindir: Path, base: Path) -> Iterator[str]:
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
    run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o",
        f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    try:
        yield f"postgresql://streamanon@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast",
                        "-w", "stop"], capture_output=True)
