"""A server and worker processes on a PostgreSQL database, for the benchmarks that need
one cluster for several runs (bench/scale.py, bench/history.py)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from run import PYTHON_PROCESSES, _free_port, _spawn, _start_and_wait, chain_playbook, wait_healthy

from noetl.auth import Role, issue_token
from noetl.store import open_store


@dataclass
class Running:
    db: str
    url: str
    token: str
    procs: list[subprocess.Popen[bytes]]

    def run(self, text: str, runs: int = 1, timeout: float = 3600) -> tuple[list[str], float]:
        """Start `runs` executions of `text` at once; their ids and the wall seconds."""
        return _start_and_wait(self.url, self.db, text, runs, timeout, token=self.token)


@contextlib.contextmanager
def cluster(db: str, workers: int, concurrency: int | None = None) -> Iterator[Running]:
    """`noetl server start` and `workers` times `noetl worker start` on `db`, warmed up with a
    short chain; all stopped on exit. The workers run with their own defaults, chosen from
    the machine, as a user runs them (`concurrency`: that many task slots instead)."""
    store = open_store(db)  # also creates the schema
    try:
        token, _ = issue_token(store.tokens, role=Role.OPERATOR, name="bench", now=time.time())
    finally:
        store.close()
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        procs = [_spawn(["server", "start", "--port", str(port)], db, log)]
        worker = ["worker", "start"]
        if concurrency is not None:
            processes = str(min(concurrency, PYTHON_PROCESSES))
            worker += ["--concurrency", str(concurrency), "--python-processes", processes]
        procs += [_spawn(worker, db, Path(tmp) / f"w{i}.log") for i in range(workers)]
        running = Running(db, f"http://127.0.0.1:{port}", token, procs)
        try:
            wait_healthy(running.url, log)
            running.run(chain_playbook(2 * workers))  # warm every worker
            yield running
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
