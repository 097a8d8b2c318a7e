"""The timeline of an execution, read from its event log (for the console's Gantt chart).

Each step is a row from its first start to its last end; under it, its tasks (the step's
call, or one loop item each) with one span per attempt, so a retry or a lost lease shows
as a segment of its own. The attempts and runs are the folds of `step_view` and
`step_runs`, fed in one pass over the log.

A loop of thousands of items would be thousands of rows: at most `limit` tasks of a step
are listed, those that failed, were retried or are still running first, and the rest
is one aggregate (`hidden`): how many tasks and attempts, by status, and when they ran.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from noetl.core import Event, EventType
from noetl.engine import StepRun
from noetl.runtime.step_runs import RunEntry, RunFold, runs_of, settle
from noetl.runtime.step_view import Attempt, AttemptFold, AttemptStatus

__all__ = ["Hidden", "StepSpans", "execution_timeline"]

# An error in a span's tooltip: its beginning is enough.
ERROR_PREVIEW = 200


def _span(attempt: Attempt) -> dict[str, Any]:
    error = attempt.error
    return {
        "task_id": attempt.task_id,
        "index": attempt.index,
        "attempt": attempt.attempt,
        "run": attempt.run,
        "status": attempt.status.value,
        "started_at": attempt.started_at,
        "finished_at": attempt.finished_at,
        "delay_ms": attempt.delay_ms,
        "error": error[:ERROR_PREVIEW] if error else None,
    }


@dataclass
class Hidden:
    """The tasks of a step left out of the list, in aggregate."""

    tasks: int = 0
    attempts: int = 0
    statuses: Counter[str] = field(default_factory=Counter)  # attempt status -> count
    started_at: float | None = None
    finished_at: float | None = None

    def add(self, attempts: Sequence[Attempt]) -> None:
        self.tasks += 1
        for attempt in attempts:
            self.attempts += 1
            self.statuses[attempt.status.value] += 1
            if self.started_at is None or attempt.started_at < self.started_at:
                self.started_at = attempt.started_at
            end = attempt.finished_at
            if end is not None and (self.finished_at is None or end > self.finished_at):
                self.finished_at = end

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "attempts": self.attempts,
            "statuses": dict(sorted(self.statuses.items())),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }


@dataclass
class StepSpans:
    """One step's row of the timeline."""

    step: str
    status: str
    runs: int
    started_at: float | None
    finished_at: float | None
    tasks: list[list[Attempt]]  # the listed tasks, each its attempts in order
    total_tasks: int
    total_attempts: int
    hidden: Hidden

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "status": self.status,
            "runs": self.runs,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "tasks": self.total_tasks,
            "attempts": self.total_attempts,
            "spans": [_span(a) for attempts in self.tasks for a in attempts],
            "hidden": self.hidden.to_dict() if self.hidden.tasks else None,
        }


def _notable(attempts: Sequence[Attempt]) -> bool:
    """Worth a row of its own: retried, or any attempt not (yet) ok."""
    return len(attempts) > 1 or any(a.status is not AttemptStatus.OK for a in attempts)


def _by_task(attempts: Iterable[Attempt]) -> list[list[Attempt]]:
    """The attempts grouped by task, tasks in the order they first began."""
    grouped: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        grouped.setdefault(attempt.task_id, []).append(attempt)
    return list(grouped.values())


def _bounds(
    runs: Sequence[RunEntry], attempts: Sequence[Attempt], current: StepRun
) -> tuple[float | None, float | None]:
    """From the first start (of a run or an attempt) to the end of the latest run; no
    end while the step is not done."""
    starts = [r.started_at for r in runs if r.started_at is not None]
    starts += [a.started_at for a in attempts]
    start = min(starts) if starts else current.started_at
    if not current.status.done:
        return start, None
    ends = [r.finished_at for r in runs if r.finished_at is not None]
    ends += [a.finished_at for a in attempts if a.finished_at is not None]
    end = current.finished_at if current.finished_at is not None else max(ends, default=None)
    return start, end


def _step_spans(
    step: str, attempts: list[Attempt], runs: list[RunEntry], current: StepRun, limit: int
) -> StepSpans:
    settle(runs, attempts, current)
    tasks = _by_task(attempts)
    notable = [t for t in tasks if _notable(t)]
    plain = [t for t in tasks if not _notable(t)]
    listed = {id(t) for t in (notable + plain)[:limit]}
    hidden = Hidden()
    for task in tasks:
        if id(task) not in listed:
            hidden.add(task)
    start, end = _bounds(runs, attempts, current)
    return StepSpans(
        step=step,
        status=current.status.value,
        runs=runs_of(current),
        started_at=start,
        finished_at=end,
        tasks=[t for t in tasks if id(t) in listed],
        total_tasks=len(tasks),
        total_attempts=len(attempts),
        hidden=hidden,
    )


def execution_timeline(
    events: Iterable[Event], steps: Mapping[str, StepRun], *, limit: int
) -> list[StepSpans]:
    """The timeline rows of the steps in `steps` (their order; each with its state), from
    one pass over `events`; at most `limit` tasks listed per step."""
    attempt_folds = {name: AttemptFold(name) for name in steps}
    run_folds = {name: RunFold(name) for name in steps}
    for event in events:
        if event.type == EventType.TASK_CANCELED:
            # It names task ids only: every step may hold one of them.
            for fold in attempt_folds.values():
                fold.canceled(event)
            continue
        if event.step is None or event.step not in steps:
            continue
        attempt_folds[event.step].feed(event)
        run_folds[event.step].feed(event)
    return [
        _step_spans(name, attempt_folds[name].all, run_folds[name].all, run, limit)
        for name, run in steps.items()
    ]
