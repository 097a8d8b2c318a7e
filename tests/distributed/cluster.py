"""Real processes for distributed tests: `noetl server start` and `noetl worker start`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.helpers.auth import token_in_database

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, sig: int) -> None:
        os.kill(self.popen.pid, sig)

    def kill9(self) -> None:
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self, timeout: float = 20) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        return int(self.popen.returncode)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@dataclass
class Cluster:
    """Servers and workers sharing one database, started as real subprocesses."""

    db: str
    workdir: Path
    procs: list[Proc] = field(default_factory=list)
    port: int = 0
    env: dict[str, str] = field(default_factory=dict)
    # An admin token, made in the database before the first server starts; sent by the
    # requests below and given to every process as NOETL_API_TOKEN (for CLI calls).
    token: str = ""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _spawn(self, name: str, *args: str) -> Proc:
        log = self.workdir / f"{name}.log"
        env = {**os.environ, "NOETL_DB": self.db, "PYTHONUNBUFFERED": "1", **self.env}
        if self.token:
            env["NOETL_API_TOKEN"] = self.token
        with log.open("wb") as fh:  # the child keeps its own copy of the descriptor
            popen = subprocess.Popen(
                [sys.executable, "-m", "noetl", *args],
                cwd=ROOT,
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def start_server(self, port: int | None = None, name: str = "server") -> Proc:
        port = port or self.port or free_port()
        self.port = self.port or port
        if not self.token:
            self.token = token_in_database(self.db)
        proc = self._spawn(name, "server", "start", "--port", str(port))
        wait_until(lambda: self._healthy(port), 30, f"{name} on port {port}")
        return proc

    def start_worker(self, name: str, *, lease_s: float = 2.0, concurrency: int = 2) -> Proc:
        return self._spawn(
            name,
            "worker",
            "start",
            "--lease",
            str(lease_s),
            "--concurrency",
            str(concurrency),
            "--poll",
            "0.2",
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _healthy(self, port: int) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def start_execution(self, playbook: str, workload: dict[str, Any] | None = None) -> str:
        response = httpx.post(
            f"{self.url}/api/executions",
            json={"playbook": playbook, "workload": workload or {}},
            headers=self.headers,
            timeout=30,
        )
        assert response.status_code == 201, response.text
        return str(response.json()["execution_id"])

    def execution(self, execution_id: str) -> dict[str, Any]:
        response = httpx.get(
            f"{self.url}/api/executions/{execution_id}", headers=self.headers, timeout=30
        )
        assert response.status_code == 200, response.text
        return dict(response.json())

    def wait_finished(self, execution_id: str, timeout: float = 60) -> dict[str, Any]:
        result: dict[str, Any] = {}

        def done() -> bool:
            nonlocal result
            try:
                result = self.execution(execution_id)
            except (httpx.HTTPError, AssertionError):
                return False
            return result.get("status") in ("ok", "fail", "canceled")

        try:
            wait_until(done, timeout, f"execution {execution_id} to finish", interval=0.2)
        except AssertionError:
            logs = "\n".join(f"--- {p.name}\n{p.output()[-3000:]}" for p in self.procs)
            raise AssertionError(
                f"execution {execution_id} did not finish: {json.dumps(result)}\n{logs}"
            ) from None
        return result

    def events(self, execution_id: str) -> list[dict[str, Any]]:
        response = httpx.get(
            f"{self.url}/api/executions/{execution_id}/events",
            params={"limit": 10000},
            headers=self.headers,
            timeout=30,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        items = body["items"] if isinstance(body, dict) else body
        return list(items)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
