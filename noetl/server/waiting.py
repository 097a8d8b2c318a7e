"""Which workers are alive, and whether an execution's queued tasks have one to take them.

A worker heartbeats every third of its lease (10 s by default); one killed without a
chance to say so keeps its last status while its heartbeat ages. Work queued for a pool no
live worker serves waits until one starts: the console shows it as "queued, no worker
alive" rather than as running.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from noetl.store.base import Store, WorkerRecord

# A heartbeat this recent counts as alive (GET /api/workers's default `alive_within_s`).
ALIVE_WITHIN_S = 60.0


def is_alive(worker: WorkerRecord, now: float, within_s: float = ALIVE_WITHIN_S) -> bool:
    """Not stopped, and heard from within `within_s` of `now`."""
    return worker.status != "stopped" and now - worker.heartbeat_at <= within_s


@dataclass(frozen=True, slots=True)
class QueueState:
    """An execution's queued tasks against the live workers.

    `queued`: tasks waiting in the queue by step; `waiting`: the steps of those whose pool
    has no live worker taking new tasks (a draining worker takes none)."""

    workers_alive: int
    queued: dict[str, int] = field(default_factory=dict)
    waiting: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "workers_alive": self.workers_alive,
            "queued_tasks": sum(self.queued.values()),
            "queued_steps": dict(self.queued),
            "waiting_without_workers": bool(self.waiting),
            "waiting_steps": list(self.waiting),
        }


def queue_state(store: Store, execution_id: str, now: float) -> QueueState:
    """The execution's queued tasks, and which of them no live worker can take."""
    alive = [worker for worker in store.list_workers() if is_alive(worker, now)]
    taking = {worker.pool for worker in alive if worker.status == "running"}
    queued: dict[str, int] = {}
    waiting: list[str] = []
    for (step, pool), count in sorted(store.queued_tasks(execution_id).items()):
        queued[step] = queued.get(step, 0) + count
        if pool not in taking and step not in waiting:
            waiting.append(step)
    return QueueState(workers_alive=len(alive), queued=queued, waiting=tuple(waiting))
