"""Prefect flows and tasks for prefect_bench.py (imported once the environment is set)."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner


@task
def add_one(v: int) -> int:
    return v + 1


@task
def double(x: int) -> int:
    return x * 2


@flow
def chain(n: int) -> int:
    v = 0
    for _ in range(n):
        v = add_one(v)
    return v


@flow(task_runner=ThreadPoolTaskRunner(max_workers=64))
def fanout(n: int) -> list[int]:
    return list(double.map(range(n)).result())


@flow(task_runner=ThreadPoolTaskRunner(max_workers=2))
def join() -> int:
    a = add_one.submit(1)
    b = add_one.submit(2)
    return add_one(int(a.result()) + int(b.result()))


@flow
def five() -> int:
    v = 0
    for _ in range(5):
        v = add_one(v)
    return v


def start_server() -> None:
    """Start the ephemeral API server from this thread, with one flow run of `five`.

    The first API client of the process starts the server, and that start is not thread-safe
    in Prefect 3.9: a second thread sees the server marked running before its process exists
    and fails with "Server process did not start" (and the server may outlive the process).
    """
    if five() != 5:
        raise SystemExit("the warm-up flow computed a wrong value")


def run(workload: str, n: int) -> Any:
    if workload == "chain":
        return chain(n)
    if workload == "fanout":
        return fanout(n)
    # join / burst: n flow runs at once, one thread each (a sync flow call runs in the
    # calling thread); the results are collected in start order.
    runs = join if workload == "join" else five
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix=workload) as pool:
        futures = [pool.submit(runs) for _ in range(n)]
        return [future.result() for future in futures]


class RetryCounter(logging.Filter):
    """Counts the API client's retries (logged at DEBUG by the "prefect.client" logger, e.g.
    a 503 the server sends when SQLite reports "database is locked"), without printing them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self._lock = threading.Lock()
        client = logging.getLogger("prefect.client")
        client.setLevel(logging.DEBUG)
        client.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            if "retryable" in record.getMessage():
                with self._lock:
                    self.count += 1
            return False
        return True
