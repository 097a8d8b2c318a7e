"""Execution state: a fold of the event log.

`apply(state, event)` is the only way state changes, and it never computes anything that
needs the playbook or a template: every derived value travels inside the events, so the
same log always folds to the same state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from noetl.core import Event, EventType, ExecutionStatus, StepStatus
from noetl.engine.runs import CaseRun, StepRun

__all__ = [
    "CaseRun",
    "ExecutionState",
    "StepNamespace",
    "StepRun",
    "apply",
    "fold",
]


@dataclass(slots=True)
class ExecutionState:
    """Everything the engine knows about one execution."""

    execution_id: str
    steps: dict[str, StepRun]
    status: ExecutionStatus = ExecutionStatus.RUNNING
    workload: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    # Upstream NoETL's execution variables (`ctx`): each change is a patch `{name: value}`
    # in the event that makes it (`ctx` of `step.finished`, `next.evaluated`,
    # `tool.processed`); later patches win, in event order (noetl.engine.variables).
    ctx: dict[str, Any] = field(default_factory=dict)
    seq: int = 0
    tasks: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)  # tasks past their first attempt
    # Lease expiries of a task since its last outcome (the engine caps them).
    reclaims: dict[str, int] = field(default_factory=dict)
    # Tasks in flight whose sinks are handed off (`Task.sinks_pool`): what their `sinks`
    # task needs (noetl.engine.handoff), until it is dispatched or the step finishes.
    deferred: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Derived indexes kept by the reducer so a decision costs the same in a long workflow:
    parked: dict[str, None] = field(default_factory=dict)
    running: set[str] = field(default_factory=set)
    # Failed steps whose failure nothing handled (no edge fired, `on_step_fail: halt`);
    # a replay of the step takes it off.
    unhandled: set[str] = field(default_factory=set)
    # Steps that finished ok, in completion order (the saga walks it backwards).
    completed: list[str] = field(default_factory=list)
    # Compensating steps still to run once rollback has begun; None when not rolling back.
    compensation: list[str] | None = None
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None

    @classmethod
    def new(cls, execution_id: str, step_names: Iterable[str]) -> ExecutionState:
        return cls(execution_id=execution_id, steps={name: StepRun() for name in step_names})

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    @property
    def unhandled_failure(self) -> bool:
        """Whether a failure nothing handled makes the execution end `fail`."""
        return bool(self.unhandled)

    def step_summaries(self) -> dict[str, dict[str, Any]]:
        return {name: run.summary() for name, run in self.steps.items()}


class StepNamespace(Mapping[str, Any]):
    """The read-only `step` name in templates: `step.<id>.status` and `step.<id>.result`."""

    __slots__ = ("_steps",)

    def __init__(self, steps: Mapping[str, StepRun]) -> None:
        self._steps = steps

    def __getitem__(self, name: str) -> dict[str, Any]:
        run = self._steps[name]
        return {"status": run.status_view(), "result": run.result}

    def __iter__(self) -> Iterator[str]:
        return iter(self._steps)

    def __len__(self) -> int:
        return len(self._steps)


def apply(state: ExecutionState, event: Event) -> None:
    """Fold one event into the state (in place)."""
    if event.seq != state.seq + 1:
        raise ValueError(
            f"event seq {event.seq} does not follow {state.seq} in execution {state.execution_id}"
        )
    state.seq = event.seq
    handler = _HANDLERS.get(event.type)
    if handler is not None:
        handler(state, event)


def fold(state: ExecutionState, events: Iterable[Event]) -> ExecutionState:
    for event in events:
        apply(state, event)
    return state


def _run(state: ExecutionState, event: Event) -> StepRun:
    assert event.step is not None, f"{event.type} without a step"
    return state.steps[event.step]


def _workflow_started(state: ExecutionState, event: Event) -> None:
    state.status = ExecutionStatus.RUNNING
    state.workload = event.payload.get("workload", {})
    state.started_at = event.ts


def _step_called(state: ExecutionState, event: Event) -> None:
    payload = event.payload
    number = payload.get("run")
    if number is not None:  # a new run: what the step was is history now
        name = event.step or ""
        old = state.steps[name]
        state.steps[name] = StepRun(calls=old.calls + 1, run=int(number), result=old.result)
        state.parked.pop(name, None)
    else:
        run = _run(state, event)
        run.calls += 1
        if payload.get("deferred"):
            run.recall = str(payload["by"])
    if payload.get("compensating") and state.compensation:
        state.compensation.pop(0)


def _step_parked(state: ExecutionState, event: Event) -> None:
    _run(state, event).status = StepStatus.PARKED
    state.parked[event.step or ""] = None


def _step_started(state: ExecutionState, event: Event) -> None:
    run = _run(state, event)
    run.status = StepStatus.RUNNING
    run.started_at = event.ts
    state.parked.pop(event.step or "", None)
    state.running.add(event.step or "")
    run.bind = event.payload.get("bind", {})
    task = event.payload.get("task")
    if task is not None:
        state.tasks[task["task_id"]] = (event.step or "", None)
        _defer(state, task)
        run.in_flight += 1


def _loop_started(state: ExecutionState, event: Event) -> None:
    run = _run(state, event)
    run.is_loop = True
    run.loop_seq = event.seq
    run.items = list(event.payload.get("items", []))
    run.total = len(run.items)
    if "max_concurrency" in event.payload or "mode" in event.payload:
        run.loop_mode = event.payload.get("mode")
        run.loop_limit = event.payload.get("max_concurrency")


def _iteration_started(state: ExecutionState, event: Event) -> None:
    run = _run(state, event)
    index = int(event.payload["index"])
    if "key" in event.payload:
        run.keys[index] = event.payload["key"]
    task = event.payload.get("task")
    if task is not None:  # no task: the item finished inline (no tool, or a render error)
        state.tasks[task["task_id"]] = (event.step or "", index)
        _defer(state, task)
        run.in_flight += 1
    run.next_index = max(run.next_index, index + 1)


def _patch_ctx(state: ExecutionState, event: Event) -> None:
    patch = event.payload.get("ctx")
    if patch:
        state.ctx.update(patch)


def _tool_processed(state: ExecutionState, event: Event) -> None:
    _patch_ctx(state, event)
    task_id = event.payload["task_id"]
    state.attempts.pop(task_id, None)
    state.reclaims.pop(task_id, None)
    if state.tasks.pop(task_id, None) is not None:
        _run(state, event).in_flight -= 1


def _iteration_finished(state: ExecutionState, event: Event) -> None:
    run = _run(state, event)
    index = int(event.payload["index"])
    ok = bool(event.payload["ok"])
    run.completed += 1
    run.results.record(
        index, ok=ok, out=event.payload.get("out"), collect_key=event.payload.get("collect_key")
    )
    if ok:
        run.succeeded += 1
    else:
        run.failed += 1
    if event.payload.get("stop"):
        run.stopped = True


def _step_finished(state: ExecutionState, event: Event) -> None:
    run = _run(state, event)
    payload = event.payload
    run.status = StepStatus.OK if payload["status"] == "ok" else StepStatus.FAILED
    state.running.discard(event.step or "")
    if run.status is StepStatus.OK:
        state.completed.append(event.step or "")
    run.error = payload.get("error")
    run.result = payload.get("result")
    run.finished_at = event.ts
    run.items = []  # the collection is not needed any more; keep memory flat
    if state.deferred:  # a task that failed for good kept its sinks' hand-off
        name = event.step or ""
        for task_id in [t for t, task in state.deferred.items() if task["step"] == name]:
            del state.deferred[task_id]
    saved_as = payload.get("saved_as")
    if saved_as:
        state.context[saved_as] = run.result
    state.context.update(payload.get("context", {}))
    _patch_ctx(state, event)


def _next_evaluated(state: ExecutionState, event: Event) -> None:
    _patch_ctx(state, event)
    run = _run(state, event)
    run.taken = list(event.payload.get("taken", []))
    if event.payload.get("unhandled_failure"):
        state.unhandled.add(event.step or "")


def _step_skipped(state: ExecutionState, event: Event) -> None:
    run = _run(state, event)
    name = event.step or ""
    if name in state.running:  # a `skip` action of its case ended a running step
        state.running.discard(name)
        run.finished_at = event.ts
    else:  # still parked when the execution went quiet
        run.before_finish = StepStatus.PARKED
    run.status = StepStatus.SKIPPED
    state.parked.pop(name, None)


def _task_reclaimed(state: ExecutionState, event: Event) -> None:
    task_id = event.payload["task_id"]
    state.attempts[task_id] = int(event.payload["attempt"])
    state.reclaims[task_id] = state.reclaims.get(task_id, 0) + 1


def _retry_started(state: ExecutionState, event: Event) -> None:
    """A task whose outcome was just processed runs again: it is in flight once more. A
    retry that runs the step's chain again (`restart: case`) starts with its `case`,
    whose branches act again: the task is dispatched after them, with this attempt."""
    task_id = event.payload["task_id"]
    if event.payload.get("restart") == "case":
        state.attempts[task_id] = int(event.payload["attempt"])
        case = _run(state, event).case
        if case is not None:
            case.fired.clear()
            case.suppressed.clear()
            case.routes.clear()
            case.failed.clear()
            case.verdict = None
        return
    index = event.payload.get("index")
    state.tasks[task_id] = (event.step or "", None if index is None else int(index))
    state.attempts[task_id] = int(event.payload["attempt"])
    _run(state, event).in_flight += 1


def _task_canceled(state: ExecutionState, event: Event) -> None:
    for task_id in event.payload.get("task_ids", []):
        entry = state.tasks.pop(task_id, None)
        state.deferred.pop(task_id, None)
        if entry is not None:
            state.steps[entry[0]].in_flight -= 1


def _compensation_started(state: ExecutionState, event: Event) -> None:
    state.compensation = list(event.payload.get("queue", []))
    state.parked.clear()
    for name in sorted(state.running):
        state.steps[name].status = StepStatus.CANCELED
    state.running.clear()


def _workflow_finished(state: ExecutionState, event: Event) -> None:
    state.status = ExecutionStatus(event.payload["status"])
    state.finished_at = event.ts
    state.parked.clear()
    state.running.clear()
    state.error = event.payload.get("error")
    for run in state.steps.values():
        if run.status is StepStatus.RUNNING:
            run.before_finish = StepStatus.RUNNING
            run.status = StepStatus.CANCELED
        elif run.status in (StepStatus.PARKED, StepStatus.PENDING):
            run.before_finish = run.status
            run.status = StepStatus.SKIPPED


def _workflow_reopened(state: ExecutionState, event: Event) -> None:
    """A replay reopens a failed execution: running again, the steps its end skipped back
    to pending or parked, the steps its end canceled back to pending (to run again)."""
    state.status = ExecutionStatus.RUNNING
    state.finished_at = None
    state.error = None
    for name in event.payload.get("restart", []):
        state.steps[name] = StepRun(calls=state.steps[name].calls)
    for name, status in event.payload.get("restore", {}).items():
        run = state.steps[name]
        run.status = StepStatus(status)
        run.before_finish = None
        if run.status is StepStatus.PARKED:
            state.parked[name] = None


def _task_replayed(state: ExecutionState, event: Event) -> None:
    """A dead-lettered task runs again (attempts from 1): its step, or its loop item, is
    running once more and no longer counts as failed."""
    name = event.step or ""
    run = state.steps[name]
    task_id = event.payload["task_id"]
    index = event.payload.get("index")
    if index is not None:
        index = int(index)
        if run.results.forget(index) is not None:
            run.completed -= 1
            run.failed -= 1
        if len(run.items) <= index:  # the finished loop let go of its items
            run.items = [None] * max(run.total or 0, index + 1)
        run.items[index] = event.payload.get("item")
    if run.status is not StepStatus.RUNNING:
        run.status = StepStatus.RUNNING
        run.error = None
        run.finished_at = None
        state.running.add(name)
    state.unhandled.discard(name)
    state.tasks[task_id] = (name, index)
    state.attempts.pop(task_id, None)
    state.reclaims.pop(task_id, None)
    task = event.payload.get("task")
    if isinstance(task, dict):
        _defer(state, task)
    run.in_flight += 1


def _loop_timed_out(state: ExecutionState, event: Event) -> None:
    _run(state, event).stopped = True


def _case_started(state: ExecutionState, event: Event) -> None:
    run = _run(state, event)
    if run.case is None:
        run.case = CaseRun()
    case = run.case
    case.round = int(event.payload["round"])
    case.verdict = None
    if "outcome" in event.payload:
        case.outcome = event.payload["outcome"]


def _case_evaluated(state: ExecutionState, event: Event) -> None:
    case = _run(state, event).case
    assert case is not None, "case.evaluated before case.started"
    payload = event.payload
    for attribute, key in (("fired", "fired"), ("suppressed", "suppressed"), ("routes", "routes")):
        seen: list[int] = getattr(case, attribute)
        seen.extend(b for b in payload.get(key, ()) if b not in seen)
    case.verdict = payload.get("verdict")


def _case_branch_started(state: ExecutionState, event: Event) -> None:
    run = _run(state, event)
    assert run.case is not None, "case.branch.started before case.started"
    state.context.update(event.payload.get("context", {}))
    task = event.payload.get("task")
    if task is not None:
        state.tasks[task["task_id"]] = (event.step or "", None)
        run.case.tasks[task["task_id"]] = int(event.payload["branch"])
        _defer(state, task)
        run.in_flight += 1


def _case_branch_finished(state: ExecutionState, event: Event) -> None:
    case = _run(state, event).case
    assert case is not None, "case.branch.finished before case.started"
    payload = event.payload
    branch = int(payload["branch"])
    if payload.get("ok"):
        case.failed.pop(branch, None)  # a replayed branch task that now succeeded
        state.context.update(payload.get("context", {}))
    else:
        case.failed[branch] = str(payload.get("error"))


def _tool_started(state: ExecutionState, event: Event) -> None:
    """The step's own task, dispatched after its `on_entry` case."""
    state.tasks[event.payload["task"]["task_id"]] = (event.step or "", None)
    _defer(state, event.payload["task"])
    _run(state, event).in_flight += 1


def _sink_started(state: ExecutionState, event: Event) -> None:
    """A task's sinks handed off: its `sinks` task is in flight for the same step, loop
    item or case branch."""
    run = _run(state, event)
    task = event.payload["task"]
    handed = state.deferred.pop(event.payload["from"], None)
    index = event.payload.get("index")
    state.tasks[task["task_id"]] = (event.step or "", None if index is None else int(index))
    if run.case is not None and handed is not None:
        branch = run.case.tasks.get(handed["task_id"])
        if branch is not None:
            run.case.tasks[task["task_id"]] = branch
    run.in_flight += 1


def _defer(state: ExecutionState, task: dict[str, Any]) -> None:
    """Keep what a task's `sinks` task needs when its sinks are handed off."""
    if task.get("sinks_pool"):
        state.deferred[task["task_id"]] = {key: task.get(key) for key in _HANDED_OFF}


# What a `sinks` task takes from the task whose sinks it runs.
_HANDED_OFF = (
    "task_id",
    "step",
    "key",
    "index",
    "context",
    "sinks",
    "pick",
    "sinks_pool",
)


_HANDLERS: dict[str, Callable[[ExecutionState, Event], None]] = {
    EventType.WORKFLOW_STARTED: _workflow_started,
    EventType.STEP_CALLED: _step_called,
    EventType.STEP_PARKED: _step_parked,
    EventType.STEP_STARTED: _step_started,
    EventType.LOOP_STARTED: _loop_started,
    EventType.LOOP_ITERATION_STARTED: _iteration_started,
    EventType.TOOL_PROCESSED: _tool_processed,
    EventType.LOOP_ITERATION_FINISHED: _iteration_finished,
    EventType.STEP_FINISHED: _step_finished,
    EventType.NEXT_EVALUATED: _next_evaluated,
    EventType.STEP_SKIPPED: _step_skipped,
    EventType.TASK_CANCELED: _task_canceled,
    EventType.TASK_RECLAIMED: _task_reclaimed,
    EventType.RETRY_STARTED: _retry_started,
    EventType.COMPENSATION_STARTED: _compensation_started,
    EventType.WORKFLOW_FINISHED: _workflow_finished,
    EventType.WORKFLOW_REOPENED: _workflow_reopened,
    EventType.TASK_REPLAYED: _task_replayed,
    EventType.LOOP_TIMED_OUT: _loop_timed_out,
    EventType.CASE_STARTED: _case_started,
    EventType.CASE_EVALUATED: _case_evaluated,
    EventType.CASE_BRANCH_STARTED: _case_branch_started,
    EventType.CASE_BRANCH_FINISHED: _case_branch_finished,
    EventType.TOOL_STARTED: _tool_started,
    EventType.SINK_STARTED: _sink_started,
}
