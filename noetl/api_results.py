"""What `noetl.run` returns: the execution and each of its steps, as frozen, typed values.

`RunReport` holds what `noetl run --json` prints (`to_dict()` is that object) and, per
step, a `StepReport`: its status, its result, its error, and the attempts and retries
the event log records (the facts the `noetl run` summary prints, noetl.cli.summary).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from noetl.cli.summary import FailedItem, StepFacts
from noetl.core import ExecutionStatus, StepStatus
from noetl.decision.records import RunResult
from noetl.engine.runs import StepRun

__all__ = ["FailedItem", "RunReport", "StepReport", "report"]


@dataclass(frozen=True, slots=True)
class StepReport:
    """One step of an execution, as it ended.

    `result` is the step's result (a large one spilled to the result store shows as its
    envelope with `_ref`, see docs/python-api.md); `attempts` counts the tool runs
    reported (each try of each task; 0 for a step without a tool), `retries` the retries
    started; `runs` the runs of a step on a cycle. A loop's counters are set for a loop
    only (`total` is None otherwise); `failed_items` lists its items that failed for good.
    `line` is the step's line in the playbook, when known."""

    name: str
    status: StepStatus
    result: Any = None
    error: str | None = None
    attempts: int = 0
    retries: int = 0
    runs: int = 1
    total: int | None = None
    completed: int = 0
    succeeded: int = 0
    failed: int = 0
    failed_items: tuple[FailedItem, ...] = ()
    line: int | None = None
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def ok(self) -> bool:
        return self.status is StepStatus.OK

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at


@dataclass(frozen=True, slots=True)
class RunReport:
    """An execution that ended: `ok`, `status` (`ExecutionStatus.OK`, `FAIL` or
    `CANCELED`), `steps` by name, `context` (the values saved with `result.as` and
    `collect`), `ctx` (an upstream playbook's variables), `error`, `duration_s`; `db`
    is where the run is recorded, None when it went to a temporary database."""

    execution_id: str
    status: ExecutionStatus
    steps: Mapping[str, StepReport]
    context: Mapping[str, Any]
    started_at: float
    finished_at: float
    error: str | None = None
    ctx: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    db: str | None = None
    # The runtime's result, which `noetl run` prints (to_dict).
    record: RunResult = field(repr=False, compare=False, kw_only=True)

    @property
    def ok(self) -> bool:
        return self.status is ExecutionStatus.OK

    @property
    def duration_s(self) -> float:
        return self.finished_at - self.started_at

    @property
    def failed_steps(self) -> tuple[StepReport, ...]:
        return tuple(s for s in self.steps.values() if s.status is StepStatus.FAILED)

    def to_dict(self) -> dict[str, Any]:
        """The object `noetl run --json` prints."""
        return self.record.to_dict()


def report(
    result: RunResult,
    runs: Mapping[str, StepRun],
    facts: Mapping[str, StepFacts],
    *,
    db: str | None,
) -> RunReport:
    """The report of an execution from the runtime's result, its steps' runs and the
    facts of its event log."""
    steps = {name: _step(name, run, facts.get(name)) for name, run in runs.items()}
    return RunReport(
        execution_id=result.execution_id,
        status=result.status,
        steps=MappingProxyType(steps),
        context=MappingProxyType(dict(result.context)),
        started_at=result.started_at,
        finished_at=result.finished_at,
        error=result.error,
        ctx=MappingProxyType(dict(result.ctx)),
        db=db,
        record=result,
    )


def _step(name: str, run: StepRun, facts: StepFacts | None) -> StepReport:
    facts = facts or StepFacts()
    return StepReport(
        name=name,
        status=run.status,
        result=run.result,
        error=run.error,
        attempts=facts.attempts,
        retries=facts.retries,
        runs=run.run,
        total=run.total if run.is_loop else None,
        completed=run.completed,
        succeeded=run.succeeded,
        failed=run.failed,
        failed_items=tuple(facts.failed_items),
        line=facts.line,
        started_at=run.started_at,
        finished_at=run.finished_at,
    )
