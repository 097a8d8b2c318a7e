"""A PostgreSQL server of a test's own: a fresh cluster (`initdb`) on a free port, run
by the `postgres` system user, stopped and removed when the test ends. For tests that
restart or stop PostgreSQL, which must not touch the server other tests share."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.distributed.cluster import free_port

__all__ = ["PrivatePostgres", "private_postgres", "private_postgres_missing"]


def _bindir() -> Path | None:
    root = Path("/usr/lib/postgresql")
    if not root.is_dir():
        return None
    versions = sorted((p for p in root.iterdir() if (p / "bin" / "initdb").exists()), key=str)
    return versions[-1] / "bin" if versions else None


def private_postgres_missing() -> str | None:
    """Why a private PostgreSQL cannot run here, or None when it can."""
    if _bindir() is None:
        return "no PostgreSQL server binaries under /usr/lib/postgresql"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no `postgres` system user to run a private PostgreSQL"
    if os.geteuid() != 0 and pwd.getpwuid(os.geteuid()).pw_name != "postgres":
        return "a private PostgreSQL needs root (to run it as `postgres`)"
    return None


@dataclass
class PrivatePostgres:
    dsn: str
    data: Path
    bindir: Path
    port: int

    def _ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data), *args]),
            check=True,
            capture_output=True,
            timeout=120,
        )

    def restart(self) -> None:
        """Restart the server (fast shutdown: sessions are ended, as an outage does)."""
        log = str(self.data / "server.log")  # not our pipes: pg_ctl's server outlives it
        self._ctl("-w", "-m", "fast", "-o", self._options(), "-l", log, "restart")

    def _options(self) -> str:
        return f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data}"


def _as_postgres(command: list[str]) -> list[str]:
    if pwd.getpwuid(os.geteuid()).pw_name == "postgres":
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A running private PostgreSQL (trust authentication, user `postgres`)."""
    bindir = _bindir()
    assert bindir is not None, private_postgres_missing()
    owner = pwd.getpwnam("postgres")
    base = Path(tempfile.mkdtemp(prefix="noetl-pg-"))
    os.chmod(base, 0o755)
    data = base / "data"
    data.mkdir()
    os.chown(data, owner.pw_uid, owner.pw_gid)
    try:
        subprocess.run(
            _as_postgres(
                [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        port = free_port()
        server = PrivatePostgres(
            f"postgresql://postgres@127.0.0.1:{port}/postgres", data, bindir, port
        )
        server._ctl("-w", "-o", server._options(), "-l", str(data / "server.log"), "start")
        try:
            yield server
        finally:
            subprocess.run(
                _as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                capture_output=True,
                timeout=60,
                check=False,
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
