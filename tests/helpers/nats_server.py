"""A private nats-server (JetStream, its own store directory) for tests that stop it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateNats:
    """One nats-server on a port of its own, stopped and started again at will."""

    def __init__(self, workdir: Path) -> None:
        if not Path(NATS_SERVER).exists():
            pytest.skip("nats-server is not installed")
        self.port = _free_port()
        self.store_dir = workdir / "jetstream"
        self.log = workdir / "nats.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._proc = subprocess.Popen(
            [
                NATS_SERVER,
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-js",
                "-sd",
                str(self.store_dir),
                "-l",
                str(self.log),
            ],
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the private nats-server did not start")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
        self._proc = None
