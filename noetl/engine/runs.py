"""A step's run and its `case`, as the fold of the event log (`noetl.engine.state`) keeps
them: plain data, changed only by `apply`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from noetl.core import StepStatus

__all__ = ["CaseRun", "StepRun"]


@dataclass(slots=True)
class CaseRun:
    """What a step's `case` has done in this run (folded from the `case.*` events).

    `round` counts evaluations (a `retry` branch makes another, on the outcome of the
    attempt it asked for); `outcome` is what an `on_event` round evaluated (the step's
    tool output, kept until the step finishes); `fired`, `suppressed` and `routes` are
    branch indexes over every round, in order; `verdict` is the latest round's `fail`,
    `skip`, `retry` or action error; `tasks` maps each branch task to its branch, and
    `failed` holds the error of every branch whose task failed for good."""

    round: int = 0
    outcome: dict[str, Any] | None = None
    fired: list[int] = field(default_factory=list)
    suppressed: list[int] = field(default_factory=list)
    routes: list[int] = field(default_factory=list)
    verdict: dict[str, Any] | None = None
    tasks: dict[str, int] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)


@dataclass(slots=True)
class StepRun:
    """The latest run of one step. A step runs at most once per execution, except that a
    call along a cycle of the graph starts a new run of a step that finished (`run`
    counts them; see noetl.engine.flow)."""

    status: StepStatus = StepStatus.PENDING
    calls: int = 0
    run: int = 1
    # A step on a cycle called while it was running: the caller, whose call starts the
    # next run once this one has finished.
    recall: str | None = None
    error: str | None = None
    result: Any = None
    bind: dict[str, Any] = field(default_factory=dict)
    is_loop: bool = False
    items: list[Any] = field(default_factory=list)
    total: int | None = None
    next_index: int = 0
    completed: int = 0
    succeeded: int = 0
    failed: int = 0
    in_flight: int = 0
    stopped: bool = False
    outs: dict[int, Any] = field(default_factory=dict)
    item_ok: dict[int, bool] = field(default_factory=dict)
    keys: dict[int, Any] = field(default_factory=dict)  # rendered `loop.key` per item
    collect_keys: dict[int, str] = field(default_factory=dict)  # `collect.key` per item
    started_at: float | None = None
    finished_at: float | None = None
    taken: list[str] = field(default_factory=list)
    # What the step was (pending or parked) before the end of its execution marked it
    # skipped: a replay that reopens the execution gives it back (`workflow.reopened`).
    before_finish: StepStatus | None = None
    # The seq of its `loop.started`: a loop's total-budget timer names the run it is for.
    loop_seq: int = 0
    # A loop's mode and window as rendered when it started (templates in upstream
    # NoETL's dialect); None: the playbook's own values.
    loop_mode: str | None = None
    loop_limit: int | None = None
    # Its `case`, once evaluated in this run (None for every step without one).
    case: CaseRun | None = None

    def status_view(self) -> dict[str, Any]:
        """`step.<id>.status`: running, done, ok, error and loop counters."""
        done = self.status.done
        return {
            "running": self.status is StepStatus.RUNNING,
            "done": done,
            "ok": (self.status is StepStatus.OK) if done else None,
            "error": self.error,
            "total": self.total,
            "completed": self.completed,
            "succeeded": self.succeeded,
            "failed": self.failed,
        }

    def summary(self) -> dict[str, Any]:
        """What `noetl run --json` and the step_state projection show for the step."""
        out: dict[str, Any] = {"status": self.status.value}
        if self.run > 1:
            out["run"] = self.run
        if self.is_loop:
            out.update(
                total=self.total,
                completed=self.completed,
                succeeded=self.succeeded,
                failed=self.failed,
            )
        if self.error is not None:
            out["error"] = self.error
        return out
