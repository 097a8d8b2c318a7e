"""The runs of one step, read from an execution's event log (for the API and the console).

A step runs once per execution, except on a cycle of the graph (`fetch -> check -> fetch`):
a call along the cycle to a step that has finished starts its next run, recorded as
`step.called` with `run: N` (see noetl.engine.flow). Each run is folded from the events
of the step between its call and the next run's: parked, started, finished or skipped.
The latest run is the one the engine's state holds; `settle` takes its status from there,
which also covers what the end of the execution does to it (canceled, skipped).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from noetl.core import Event, EventType, StepStatus
from noetl.engine import StepRun
from noetl.runtime.step_view import Attempt, AttemptFold

__all__ = ["RunEntry", "RunFold", "runs_of", "settle", "step_history"]


def runs_of(run: StepRun) -> int:
    """How many runs the step has had: the number of its latest run, or 0 when it was
    never called (nor marked done by an operator)."""
    untouched = run.calls == 0 and run.status in (StepStatus.PENDING, StepStatus.SKIPPED)
    return 0 if untouched else run.run


@dataclass
class RunEntry:
    """One run of a step."""

    run: int
    called_at: float
    by: str | None = None  # the step (or "execution") whose call started it
    status: StepStatus = StepStatus.PENDING
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    attempts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "status": self.status.value,
            "by": self.by,
            "called_at": self.called_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
            "attempts": self.attempts,
        }


class RunFold:
    """The runs of one step, folded one event at a time (`feed`)."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.all: list[RunEntry] = []

    def feed(self, event: Event) -> None:
        if event.step != self.step:
            return
        payload = event.payload
        if event.type == EventType.STEP_CALLED:
            number = payload.get("run")
            if number is not None:
                self.all.append(RunEntry(int(number), event.ts, payload.get("by")))
            elif not self.all and not payload.get("ignored") and not payload.get("deferred"):
                self.all.append(RunEntry(1, event.ts, payload.get("by")))
            return
        if not self.all:
            if event.type != EventType.STEP_STARTED:
                return
            # An operator marked a step done that was never called: that is its run.
            self.all.append(RunEntry(1, event.ts))
        latest = self.all[-1]
        if event.type == EventType.STEP_PARKED:
            latest.status = StepStatus.PARKED
        elif event.type == EventType.STEP_STARTED:
            latest.status = StepStatus.RUNNING
            latest.started_at = event.ts
        elif event.type == EventType.STEP_FINISHED:
            ok = payload.get("status") == "ok"
            latest.status = StepStatus.OK if ok else StepStatus.FAILED
            latest.finished_at = event.ts
            latest.error = payload.get("error")
        elif event.type == EventType.STEP_SKIPPED:
            latest.status = StepStatus.SKIPPED


def settle(runs: list[RunEntry], attempts: Iterable[Attempt], current: StepRun) -> None:
    """Count each run's attempts, and give the latest run the state's view of it."""
    by_number = {entry.run: entry for entry in runs}
    for attempt in attempts:
        entry = by_number.get(attempt.run)
        if entry is not None:
            entry.attempts += 1
    latest = runs[-1] if runs else None
    if latest is not None and latest.run == current.run:
        latest.status = current.status
        latest.started_at = current.started_at
        latest.finished_at = current.finished_at
        latest.error = current.error


def step_history(events: Iterable[Event], step: str) -> tuple[list[Attempt], list[RunEntry]]:
    """The attempts (in the order they began) and the runs (by number) of `step`, in one
    pass over `events`; `settle` the runs with the step's state afterwards."""
    attempts, runs = AttemptFold(step), RunFold(step)
    for event in events:
        attempts.feed(event)
        runs.feed(event)
    return attempts.all, runs.all
