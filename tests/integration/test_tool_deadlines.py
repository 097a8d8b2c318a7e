"""One time limit for every tool (noetl.worker.time_limit), with real slow tasks: a python
child that never returns, a DuckDB query that would run for hours."""

from __future__ import annotations

import contextvars
import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Outcome, Task
from noetl.tools.duckdb_tool import DuckdbTool
from noetl.worker.python_pool import PythonPool
from noetl.worker.tools import PythonTool, ToolRegistry

ROOT = Path(__file__).resolve().parents[2]
SPIN = "def main():\n    while True:\n        pass\n"


def make_task(kind: str, spec: dict[str, Any], timeout_ms: int | None) -> Task:
    return Task(
        task_id="t1",
        execution_id="e1",
        step="step",
        kind=kind,
        spec=spec,
        args={},
        context={},
        key="e1:step",
        timeout_ms=timeout_ms,
    )


@pytest.fixture
def solo() -> Iterator[PythonPool]:
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT))
        with PythonPool(processes=1) as pool:
            yield pool


class Untimed:
    """A python tool that keeps no time of its own (it hides the task's timeout and
    deadline from the pool, whose default is a minute) but can be stopped: only the time
    limit stops it."""

    kind = "untimed"

    def __init__(self, pool: PythonPool) -> None:
        self.pool = pool

    def run(self, task: Task) -> Outcome:
        untimed = dataclasses.replace(task, timeout_ms=None)
        return contextvars.Context().run(self.pool.run, untimed)

    def cancel(self, task_id: str) -> bool:
        return self.pool.cancel(task_id)


def timed(registry: ToolRegistry, task: Task) -> tuple[Outcome, float]:
    started = time.monotonic()
    outcome = registry.run(task)
    return outcome, time.monotonic() - started


def test_a_cancellable_tool_past_its_deadline_is_stopped(solo: PythonPool) -> None:
    (pid,) = solo.pids
    registry = ToolRegistry([Untimed(solo)], cancel_grace_s=0.2)
    outcome, elapsed = timed(registry, make_task("untimed", {"code": SPIN}, 300))
    assert (outcome.ok, outcome.retryable) == (False, True)
    assert outcome.error_type == "TaskTimeoutError"
    assert outcome.error == "untimed: the task ran past its timeout_ms (300); it was stopped"
    assert 0.5 <= elapsed < 3
    with pytest.raises(ProcessLookupError):  # its child was killed (and replaced)
        os.kill(pid, 0)
    again = registry.run(make_task("untimed", {"code": "def main():\n    return 7\n"}, 5_000))
    assert (again.ok, again.this) == (True, 7)


def test_a_python_task_times_out_at_the_deadline_in_its_own_words(solo: PythonPool) -> None:
    """The pool waits for the child's reply until the deadline the time limit started,
    and reports its own timeout before the grace ends: nothing stops it from outside."""
    registry = ToolRegistry([PythonTool(solo)], cancel_grace_s=5)
    outcome, elapsed = timed(registry, make_task("python", {"code": SPIN}, 400))
    assert (outcome.error_type, outcome.error) == ("TimeoutError", "timed out after 400 ms")
    assert outcome.retryable
    assert 0.4 <= elapsed < 2


def test_a_duckdb_query_past_the_deadline_is_interrupted() -> None:
    registry = ToolRegistry([DuckdbTool()])
    query = {"query": "SELECT count(*) FROM range(1000000000000) a", "database": ":memory:"}
    outcome, elapsed = timed(registry, make_task("duckdb", query, 300))
    assert (outcome.ok, outcome.retryable) == (False, True)
    assert outcome.error_type == "TaskTimeoutError"
    assert outcome.error == "duckdb: the query ran past its timeout_ms (300)"
    assert 0.3 <= elapsed < 5
