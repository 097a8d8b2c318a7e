"""What operators and budgets do to a running (or failed) execution, decided by the engine.

The handlers of three of the engine's inputs, pure functions over a `Turn` (no I/O):

* Replay (`task.replayed`, an input). The dead-lettered task runs again with its ORIGINAL
  task id, attempts from 1, possibly patched. A finished execution is reopened first
  (`workflow.reopened`): the steps its end skipped are pending or parked again, the steps
  its end canceled run again; steps that succeeded keep their results.
* Force-complete (`step.force_completed`, an input). An operator marks a parked, pending or
  stuck step done (ok or failed, with a result); tasks of it still in flight are canceled
  and the step routes as if it had finished by itself.
* A loop's total budget (`timer.fired`). A loop still running when its
  `loop.total_timeout_ms` passes stops: its tasks in flight are canceled and the step
  fails (`loop.timed_out`).

Requests the state no longer allows are recorded as `operator.refused` with the reason.
A task that fails for good is recorded as `task.dead_lettered` (`noetl.engine.attempts`,
with its reason); the runtime writes its dead-letter entry with the decision, and a replay
runs it again.

* Abort (`abort`). An execution whose decision could not be made or written (the engine
  or the store raised on its data) ends `fail`, its tasks in flight canceled, with an
  error that names what went wrong; the runtime records it once, in place of the decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from noetl.core import (
    CancelTasks,
    Decision,
    Event,
    EventType,
    ExecutionStatus,
    RequeueTask,
    StepStatus,
    Task,
)
from noetl.engine import case_chain, loops
from noetl.engine.loops import LOOP_TIMEOUT
from noetl.engine.state import ExecutionState, apply

if TYPE_CHECKING:
    from noetl.engine.turn import Facts, Turn

__all__ = [
    "LOOP_TIMEOUT",
    "abort",
    "on_force_complete",
    "on_replay",
    "on_timer",
    "replay_refusal",
]

# --- replay --------------------------------------------------------------------------------


def replay_refusal(
    engine: Facts, state: ExecutionState, step: str, task_id: str, index: int | None
) -> str | None:
    """Why a dead-lettered task of `step` cannot run again now (None: it can)."""
    if step not in state.steps:
        return f"the playbook has no step '{step}'"
    if state.status is ExecutionStatus.CANCELED:
        return "the execution was canceled"
    if state.compensation is not None:
        return "the execution rolled back (its compensations ran); start a new execution"
    if task_id in state.tasks:
        return f"task {task_id} is running"
    run = state.steps[step]
    if index is None:
        if run.status is not StepStatus.FAILED:
            return f"step '{step}' is {run.status.value}, not failed"
        return None
    if engine.graph.nodes[step].step.loop is None:
        return f"step '{step}' has no loop"
    if run.status is StepStatus.OK:
        return f"step '{step}' finished ok; its failed items stay as they are"
    if run.status not in (StepStatus.FAILED, StepStatus.RUNNING):
        return f"step '{step}' is {run.status.value}"
    if run.results.ok(index) is not False:
        return f"item {index} of step '{step}' has not failed"
    return None


def on_replay(turn: Turn, event: Event) -> None:
    """Run a dead-lettered task again (the input's payload: `task`, its patched task as a
    dict; `message_id`; `by`; `patched`, the keys changed), reopening the execution when
    it had finished."""
    state = turn.state
    payload = event.payload
    task_data = payload.get("task")
    if not isinstance(task_data, Mapping):
        reason = "the replay carries no task"
        _refuse(turn, action="replay", step=None, reason=reason, payload=payload)
        return
    task = Task.from_dict(dict(task_data))
    refusal = replay_refusal(turn.engine, state, task.step, task.task_id, task.index)
    if refusal is not None:
        _refuse(turn, action="replay", step=task.step, reason=refusal, payload=payload)
        return
    by = payload.get("by", "operator")
    if state.terminal:
        _reopen(turn, by, task.task_id)
    replayed: dict[str, Any] = {"task_id": task.task_id, "by": by}
    if task.index is not None:
        replayed["index"] = task.index
        loop = task.context.get("_loop")
        replayed["item"] = loop.get("item") if isinstance(loop, Mapping) else None
    if payload.get("patched"):
        replayed["patched"] = list(payload["patched"])
    replayed["task"] = task.to_dict()
    turn.emit(EventType.TASK_REPLAYED, task.step, replayed)
    turn.commands.append(RequeueTask(task.task_id, 1, 0.0, task=task))
    for name in turn.restart:
        turn.dispatch(name)
    turn.restart.clear()


def _reopen(turn: Turn, by: Any, task_id: str) -> None:
    state = turn.state
    restore = {
        name: run.before_finish.value
        for name, run in state.steps.items()
        if run.status is StepStatus.SKIPPED
        and run.before_finish in (StepStatus.PENDING, StepStatus.PARKED)
    }
    restart = [
        name
        for name in turn.engine.order
        if state.steps[name].status is StepStatus.CANCELED
        and state.steps[name].before_finish is StepStatus.RUNNING
    ]
    payload: dict[str, Any] = {
        "by": by,
        "task_id": task_id,
        "previous": state.status.value,
        "restore": restore,
        "restart": restart,
    }
    turn.emit(EventType.WORKFLOW_REOPENED, None, payload)
    turn.restart.extend(restart)


# --- force-complete ------------------------------------------------------------------------


def on_force_complete(turn: Turn, event: Event) -> None:
    """Mark a step done (`status` ok or failed, `result`, `reason`, `by`): its tasks in
    flight are canceled, then it finishes and routes as any step does."""
    state = turn.state
    payload = dict(event.payload)
    name = payload.get("step")
    if not isinstance(name, str) or name not in state.steps:
        reason = f"no step {name!r}"
        _refuse(turn, action="force_complete", step=None, reason=reason, payload=payload)
        return
    run = state.steps[name]
    if run.status.done:
        reason = f"step '{name}' is {run.status.value} already"
        _refuse(turn, action="force_complete", step=name, reason=reason, payload=payload)
        return
    ok = payload.get("status", "ok") == "ok"
    in_flight = sorted(t for t, (step, _) in state.tasks.items() if step == name)
    recorded: dict[str, Any] = {
        "status": "ok" if ok else "failed",
        "by": payload.get("by", "operator"),
        "reason": payload.get("reason"),
        "previous": run.status.value,
    }
    if "result" in payload:
        recorded["result"] = payload["result"]
    if in_flight:
        recorded["canceled"] = in_flight
    turn.emit(EventType.STEP_FORCE_COMPLETED, name, recorded)
    if in_flight:
        turn.emit(EventType.TASK_CANCELED, None, {"task_ids": in_flight})
        turn.commands.append(CancelTasks(tuple(in_flight)))
    if run.status is not StepStatus.RUNNING:
        turn.emit(EventType.STEP_STARTED, name, {"forced": True})
    why = payload.get("reason")
    error = None if ok else f"marked failed by an operator{f': {why}' if why else ''}"
    turn.finish_step(name, ok=ok, result=payload.get("result"), error=error, picked=True)


# --- a loop's total budget -----------------------------------------------------------------


def on_timer(turn: Turn, event: Event) -> None:
    """A timer fired: a loop still running past its total budget stops and fails; a
    chain's retry delay passed (noetl.engine.case_chain)."""
    engine, state = turn.engine, turn.state
    payload = event.payload
    if case_chain.on_timer(turn, payload):
        return
    name = payload.get("step")
    if payload.get("kind") != LOOP_TIMEOUT or not isinstance(name, str):
        return
    run = state.steps.get(name)
    step = engine.graph.nodes[name].step if name in engine.graph.nodes else None
    if (
        run is None
        or step is None
        or step.loop is None
        or run.status is not StepStatus.RUNNING
        or run.loop_seq != payload.get("loop_seq")
    ):
        return  # finished in time, or a timer of an earlier run of the step
    budget = step.loop.total_timeout_ms or engine.options.loop_total_timeout_ms
    in_flight = sorted(t for t, (owner, _) in state.tasks.items() if owner == name)
    done = run.completed
    turn.emit(
        EventType.LOOP_TIMED_OUT,
        name,
        {"total_timeout_ms": budget, "completed": done, "total": run.total, "canceled": in_flight},
    )
    if in_flight:
        turn.emit(EventType.TASK_CANCELED, None, {"task_ids": in_flight})
        turn.commands.append(CancelTasks(tuple(in_flight)))
    error = (
        f"TaskTimeoutError: the loop ran past its total budget of {budget} ms "
        f"({done} of {run.total} items done)"
    )
    loops.finish(turn, step, error=error)


# --- helpers -------------------------------------------------------------------------------


def _refuse(
    turn: Turn,
    *,
    action: str,
    step: str | None,
    reason: str,
    payload: Mapping[str, Any],
) -> None:
    refused: dict[str, Any] = {"action": action, "reason": reason, "by": payload.get("by")}
    if payload.get("message_id") is not None:
        refused["message_id"] = payload["message_id"]
    turn.emit(EventType.OPERATOR_REFUSED, step, refused)


# --- abort -------------------------------------------------------------------------------


def abort(state: ExecutionState, error: str, now: float) -> Decision:
    """End `state`'s execution in place of a decision that could not be made or written
    (`error` says why): its tasks in flight are canceled and `workflow.finished` records
    it failed, with `internal: true`. Needs no playbook, so it works where the playbook no
    longer loads. Nothing for an execution that is finished already."""
    if state.terminal:
        return Decision([], [])
    events: list[Event] = []

    def emit(event_type: EventType, payload: dict[str, Any]) -> None:
        event = Event(state.seq + 1, event_type.value, state.execution_id, now, None, payload)
        apply(state, event)
        events.append(event)

    in_flight = tuple(sorted(state.tasks))
    if in_flight:
        emit(EventType.TASK_CANCELED, {"task_ids": list(in_flight)})
    emit(
        EventType.WORKFLOW_FINISHED,
        {"status": ExecutionStatus.FAIL.value, "error": error, "internal": True},
    )
    return Decision(events, [CancelTasks(in_flight)] if in_flight else [])
