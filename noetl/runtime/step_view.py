"""The attempts of one step, read from an execution's event log (for the API).

A task (one call of a step's tool: the step itself, or one loop item) runs one or more
attempts: the first when it is dispatched, another after each retry or lease expiry.
The engine records each of these in the log, so the attempts are a fold of the events
that name the step, plus `task.canceled`, which names task ids only. A task that failed
for good is dead-lettered (`task.dead_lettered`); an operator's replay of it
(`task.replayed`) is a new attempt under the same task id, counted from 1 again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from noetl.core import Event, EventType


class AttemptStatus(StrEnum):
    RUNNING = "running"  # dispatched (a retry: once its delay has passed), no outcome yet
    OK = "ok"
    FAILED = "failed"
    LEASE_EXPIRED = "lease_expired"  # its worker was lost; the task ran again
    CANCELED = "canceled"


@dataclass
class Attempt:
    task_id: str
    index: int | None
    attempt: int
    started_at: float
    status: AttemptStatus = AttemptStatus.RUNNING
    finished_at: float | None = None
    error: str | None = None
    error_type: str | None = None
    duration_ms: float | None = None
    output: Any = None
    stdout: str | None = None  # what it printed and logged (bounded, masked)
    delay_ms: int | None = None  # a retry: how long it waited before running
    worker_id: str | None = None  # a lost lease: the worker that held it
    dead_lettered: bool = False  # it failed for good: the DLQ holds the task
    replay: bool = False  # an operator replayed the task from the DLQ
    run: int = 1  # the run of the step it belongs to (a cycle runs a step again)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "index": self.index,
            "attempt": self.attempt,
            "status": self.status.value,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
            "error_type": self.error_type,
            "duration_ms": self.duration_ms,
            "output": self.output,
            "stdout": self.stdout,
            "delay_ms": self.delay_ms,
            "worker_id": self.worker_id,
            "dead_lettered": self.dead_lettered,
            "replay": self.replay,
            "run": self.run,
        }


class AttemptFold:
    """The attempts of one step, folded one event at a time (`feed`)."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.all: list[Attempt] = []
        self.current: dict[str, Attempt] = {}  # task id -> its latest attempt
        self.run = 1  # the step's latest run: new tasks belong to it

    def feed(self, event: Event) -> None:
        if event.type == EventType.TASK_CANCELED:
            self.canceled(event)
            return
        if event.step != self.step:
            return
        if event.type == EventType.STEP_CALLED and event.payload.get("run") is not None:
            self.run = int(event.payload["run"])
        elif event.type in (
            EventType.STEP_STARTED,
            EventType.LOOP_ITERATION_STARTED,
            EventType.SINK_STARTED,
        ):
            self.dispatched(event)
        elif event.type == EventType.TASK_REPLAYED:
            self.dispatched(event, replay=True)
        elif event.type == EventType.TOOL_PROCESSED:
            self.processed(event)
        elif event.type in (EventType.RETRY_STARTED, EventType.TASK_RECLAIMED):
            self.again(event)
        elif event.type == EventType.TASK_DEAD_LETTERED:
            self.dead_lettered(event)

    def open(self, task_id: str, index: int | None, number: int, ts: float, **extra: Any) -> None:
        # A task's later attempts (a retry, a replay) stay in the run that made the task.
        previous = self.current.get(task_id)
        run = previous.run if previous is not None else self.run
        attempt = Attempt(task_id, index, number, ts, run=run, **extra)
        self.all.append(attempt)
        self.current[task_id] = attempt

    def dispatched(self, event: Event, *, replay: bool = False) -> None:
        task = event.payload.get("task")
        if not isinstance(task, dict) or not isinstance(task.get("task_id"), str):
            return
        index = event.payload.get("index", task.get("index"))
        # A replay runs the task again with its attempts counted from 1.
        number = 1 if replay else int(task.get("attempt") or 1)
        self.open(task["task_id"], index, number, event.ts, replay=replay)

    def processed(self, event: Event) -> None:
        payload = event.payload
        task_id = payload.get("task_id")
        if not isinstance(task_id, str):
            return
        attempt = self.current.get(task_id)
        if attempt is None or attempt.finished_at is not None:
            # An outcome without a dispatch in the log (a lost lease ends a task this way).
            self.open(task_id, None, int(payload.get("attempt") or 1), event.ts)
            attempt = self.current[task_id]
        attempt.finished_at = event.ts
        attempt.status = AttemptStatus.OK if payload.get("ok") else AttemptStatus.FAILED
        attempt.error = payload.get("error")
        attempt.error_type = payload.get("error_type")
        attempt.duration_ms = payload.get("duration_ms")
        attempt.output = payload.get("this")
        stdout = payload.get("stdout")
        attempt.stdout = stdout if isinstance(stdout, str) and stdout else None

    def again(self, event: Event) -> None:
        """A retry (`retry.started`) or a reclaim (`task.reclaimed`): the next attempt."""
        payload = event.payload
        task_id = payload.get("task_id")
        if not isinstance(task_id, str):
            return
        previous = self.current.get(task_id)
        index = payload.get("index", previous.index if previous else None)
        if previous is not None and previous.finished_at is None:
            # Reclaimed: the worker holding it was lost or stalled.
            previous.status = AttemptStatus.LEASE_EXPIRED
            previous.finished_at = event.ts
            previous.worker_id = payload.get("worker_id")
        number = int(payload.get("attempt") or (previous.attempt + 1 if previous else 2))
        self.open(task_id, index, number, event.ts, delay_ms=payload.get("delay_ms"))

    def dead_lettered(self, event: Event) -> None:
        attempt = self.current.get(str(event.payload.get("task_id")))
        if attempt is not None:
            attempt.dead_lettered = True

    def canceled(self, event: Event) -> None:
        for task_id in event.payload.get("task_ids") or ():
            attempt = self.current.get(task_id)
            if attempt is not None and attempt.finished_at is None:
                attempt.status = AttemptStatus.CANCELED
                attempt.finished_at = event.ts


def step_attempts(events: Iterable[Event], step: str) -> list[Attempt]:
    """Every attempt of every task of `step`, in the order they began."""
    found = AttemptFold(step)
    for event in events:
        found.feed(event)
    return found.all
