"""Starts that the API's threads make together go to the store together.

`Decider.start` hands a new execution to a group commit: starts that arrive while one is
written wait and go in the next `Store.create_executions` call (one transaction on
PostgreSQL). Each start still gets its own answer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from noetl.core import ConcurrencyError
from noetl.runtime.orchestrator import Orchestrator
from noetl.store.base import NewExecution, Store

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: one}
workflow:
  - step: only
    tool: {kind: noop, args: {n: 1}}
"""


class SlowStarts:
    """A store whose `create_executions` takes 20 ms longer, as under load, and counts
    its calls."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.calls: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def create_executions(self, items: Sequence[NewExecution]) -> list[Exception | None]:
        self.calls.append(len(items))
        time.sleep(0.02)
        return self._store.create_executions(items)


def test_starts_made_together_are_written_together(store: Store) -> None:
    slow = SlowStarts(store)
    orchestrator = Orchestrator(slow, owner="server")  # type: ignore[arg-type]

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(lambda _: orchestrator.start_execution(PLAYBOOK), range(24)))

    assert len(set(ids)) == 24
    for execution_id in ids:
        record = store.get_execution(execution_id)
        assert record is not None and record.last_seq >= 1
        assert store.queued_tasks(execution_id) == {("only", "default"): 1}
    assert sum(slow.calls) == 24
    assert len(slow.calls) < 24  # some went together


def test_a_start_whose_id_exists_fails_alone(store: Store) -> None:
    orchestrator = Orchestrator(store, owner="server")
    taken = orchestrator.start_execution(PLAYBOOK)

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [
            pool.submit(orchestrator.start_execution, PLAYBOOK, execution_id=execution_id)
            for execution_id in ("x1", taken, "x2", "x3")
        ]
        with pytest.raises(ConcurrencyError, match="already exists"):
            futures[1].result(10)
        started = [futures[n].result(10) for n in (0, 2, 3)]

    assert started == ["x1", "x2", "x3"]
    assert all(store.get_execution(execution_id) is not None for execution_id in started)
