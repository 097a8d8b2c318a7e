"""A worker that continues a chain reads the execution's log once for it: the workload
its tools see comes with the state its continuation decides on, not from a read of its
own (one round trip fewer per execution started)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Event, ExecutionStatus, Outcome, Task
from noetl.store import SqliteStore
from noetl.store.base import Store
from noetl.worker.tools import ToolRegistry
from tests.integration.test_worker_continuation import Cluster

CHAIN = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chain}
workload: {who: world, n: 3}
workflow:
  - step: s1
    tool: {kind: noop}
    next: s2
  - step: s2
    tool: {kind: noop}
"""


class SeenTool:
    """A `noop` tool that keeps the workload its task's context holds."""

    kind = "noop"
    uses_credentials = False

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def run(self, task: Task) -> Outcome:
        self.seen.append(task.context.get("workload"))
        return Outcome(task_id=task.task_id, ok=True, this=None)


def counting(base: type[Any]) -> type[Any]:
    """`base` (a real store) counting the reads of a log's first event (the workload)."""

    class Counting(base):  # type: ignore[misc, valid-type]
        first_event_reads = 0

        def load_events(
            self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
        ) -> list[Event]:
            if limit == 1 and after_seq == 0:
                type(self).first_event_reads += 1
            result: list[Event] = super().load_events(
                execution_id, after_seq=after_seq, limit=limit
            )
            return result

    return Counting


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened: Store
    if request.param == "sqlite":
        opened = counting(SqliteStore)(tmp_path / "db.sqlite")
    else:
        from noetl.store.postgres import PostgresStore

        opened = counting(PostgresStore)(request.getfixturevalue("pg_database"))
    yield opened
    opened.close()


def test_a_continued_chain_sees_its_workload_without_reading_it_apart(store: Store) -> None:
    tool = SeenTool()
    cluster = Cluster(store, workers=1, decide=True)
    for worker in cluster.workers:
        worker.tools = ToolRegistry([tool])
    try:
        execution_id = cluster.run(CHAIN)
    finally:
        cluster.close()
    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK
    assert tool.seen == [{"who": "world", "n": 3}] * 2
    assert cluster.continued() == 2  # both steps decided by the worker
    assert type(store).first_event_reads == 0  # type: ignore[attr-defined]
