"""The worker's table of tasks in flight: how many count against its claim window."""

from __future__ import annotations

from noetl.core import Task
from noetl.store.base import Lease
from noetl.worker.in_flight import InFlightTable


def lease(task_id: str, kind: str = "python") -> Lease:
    task = Task(
        task_id=task_id, execution_id="e1", step=task_id, kind=kind, spec={}, args={},
        context={}, key=f"e1:{task_id}",
    )  # fmt: skip
    return Lease(task=task, token=1, expires_at=0.0, worker_id="w1")


def test_busy_counts_the_tasks_that_do_not_wait() -> None:
    table = InFlightTable(lambda kind: kind == "playbook")
    table.track([lease("a"), lease("b"), lease("p", "playbook")])
    assert (len(table), table.busy()) == (3, 2)
    table.track([lease("p", "playbook"), lease("a")])  # tracked again: counted once
    assert (len(table), table.busy()) == (3, 2)
    table.track([lease("a", "playbook")])  # the same id, now of a kind that waits
    assert (len(table), table.busy()) == (3, 1)
    assert table.hand_over([lease("b")], [lease("c"), lease("q", "playbook")], lambda: False) == []
    assert (len(table), table.busy()) == (4, 1)
    follow = [lease("d")]
    assert table.hand_over([lease("c"), lease("gone")], follow, lambda: True) == follow
    assert (len(table), table.busy()) == (3, 0)
    table.drop([lease("a"), lease("p"), lease("q"), lease("never")])
    assert (len(table), table.busy()) == (0, 0)
