"""Prefect flows and tasks for prefect_bench.py (imported once the environment is set)."""

from __future__ import annotations

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


def run(workload: str, n: int) -> Any:
    if workload == "chain":
        return chain(n)
    if workload == "fanout":
        return fanout(n)
    runs = join if workload == "join" else five
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(runs) for _ in range(n)]
        return [future.result() for future in futures]
