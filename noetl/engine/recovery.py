"""What operators and budgets do to a running (or failed) execution, decided by the engine.

Pure functions over an `Engine`, an `ExecutionState` and the current turn (no I/O):

* Dead letters. A task that fails for good (attempts used up, a fatal error, a failure its
  policy does not retry, a lost worker, a message that could not be decoded) is recorded
  as `task.dead_lettered`; the runtime writes its dead-letter entry with the decision.
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
    StartTimer,
    StepStatus,
    Task,
)
from noetl.core.errors import UNDECODABLE_ERROR
from noetl.engine import loops
from noetl.engine.state import apply
from noetl.errors import ErrorClass, error_class

if TYPE_CHECKING:
    from noetl.engine.engine import Engine, _Turn
    from noetl.engine.state import ExecutionState

# Dead-letter reasons (the `reason` of `task.dead_lettered` and of a DLQ entry).
EXHAUSTED = "exhausted"  # a retry was wanted, but the attempts ran out
FATAL = "fatal"  # an error retrying cannot help
FAILED = "failed"  # a failure its retry policy does not retry
LEASE_EXPIRED = "lease_expired"  # the worker was lost too many times
UNDECODABLE = "undecodable"  # the queued message could not be decoded (UNDECODABLE_ERROR)


def dead_letter_reason(outcome: Mapping[str, Any], exhausted: str | None) -> str:
    """Why a failed outcome ends its task: `exhausted` is the retry verdict's reason when
    the attempts ran out (None when no retry was wanted)."""
    if exhausted == LEASE_EXPIRED:
        return LEASE_EXPIRED
    if outcome.get("error_type") == UNDECODABLE_ERROR:
        return UNDECODABLE
    if exhausted is not None:
        return EXHAUSTED
    return FATAL if error_class(outcome) is ErrorClass.FATAL else FAILED


def failed_sink(outcome: Mapping[str, Any]) -> str | None:
    """The id of the synchronous sink whose failure failed the task, if one did."""
    for summary in outcome.get("sinks") or ():
        if isinstance(summary, Mapping) and summary.get("status") == "failed":
            return str(summary.get("id"))
    return None


# --- replay --------------------------------------------------------------------------------


def replay_refusal(
    engine: Engine, state: ExecutionState, step: str, task_id: str, index: int | None
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
    if run.item_ok.get(index) is not False:
        return f"item {index} of step '{step}' has not failed"
    return None


def on_replay(engine: Engine, state: ExecutionState, turn: _Turn, event: Event) -> None:
    """Run a dead-lettered task again (the input's payload: `task`, its patched task as a
    dict; `message_id`; `by`; `patched`, the keys changed), reopening the execution when
    it had finished."""
    payload = event.payload
    task_data = payload.get("task")
    if not isinstance(task_data, Mapping):
        _refuse(
            engine,
            state,
            turn,
            action="replay",
            step=None,
            reason="the replay carries no task",
            payload=payload,
        )
        return
    task = Task.from_dict(dict(task_data))
    refusal = replay_refusal(engine, state, task.step, task.task_id, task.index)
    if refusal is not None:
        _refuse(
            engine, state, turn, action="replay", step=task.step, reason=refusal, payload=payload
        )
        return
    by = payload.get("by", "operator")
    if state.terminal:
        _reopen(engine, state, turn, by, task.task_id)
    replayed: dict[str, Any] = {"task_id": task.task_id, "by": by}
    if task.index is not None:
        replayed["index"] = task.index
        loop = task.context.get("_loop")
        replayed["item"] = loop.get("item") if isinstance(loop, Mapping) else None
    if payload.get("patched"):
        replayed["patched"] = list(payload["patched"])
    replayed["task"] = task.to_dict()
    engine._emit(state, turn, EventType.TASK_REPLAYED, task.step, replayed)
    turn.commands.append(RequeueTask(task.task_id, 1, 0.0, task=task))
    for name in turn.restart:
        engine._dispatch(state, turn, name)
    turn.restart.clear()


def _reopen(engine: Engine, state: ExecutionState, turn: _Turn, by: Any, task_id: str) -> None:
    restore = {
        name: run.before_finish.value
        for name, run in state.steps.items()
        if run.status is StepStatus.SKIPPED
        and run.before_finish in (StepStatus.PENDING, StepStatus.PARKED)
    }
    restart = [
        name
        for name in engine.order
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
    engine._emit(state, turn, EventType.WORKFLOW_REOPENED, None, payload)
    turn.restart.extend(restart)


# --- force-complete ------------------------------------------------------------------------


def on_force_complete(engine: Engine, state: ExecutionState, turn: _Turn, event: Event) -> None:
    """Mark a step done (`status` ok or failed, `result`, `reason`, `by`): its tasks in
    flight are canceled, then it finishes and routes as any step does."""
    payload = dict(event.payload)
    name = payload.get("step")
    if not isinstance(name, str) or name not in state.steps:
        _refuse(
            engine,
            state,
            turn,
            action="force_complete",
            step=None,
            reason=f"no step {name!r}",
            payload=payload,
        )
        return
    run = state.steps[name]
    if run.status.done:
        reason = f"step '{name}' is {run.status.value} already"
        _refuse(
            engine, state, turn, action="force_complete", step=name, reason=reason, payload=payload
        )
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
    engine._emit(state, turn, EventType.STEP_FORCE_COMPLETED, name, recorded)
    if in_flight:
        engine._emit(state, turn, EventType.TASK_CANCELED, None, {"task_ids": in_flight})
        turn.commands.append(CancelTasks(tuple(in_flight)))
    if run.status is not StepStatus.RUNNING:
        engine._emit(state, turn, EventType.STEP_STARTED, name, {"forced": True})
    why = payload.get("reason")
    error = None if ok else f"marked failed by an operator{f': {why}' if why else ''}"
    engine._finish_step(
        state, turn, name, ok=ok, result=payload.get("result"), error=error, picked=True
    )


# --- a loop's total budget -----------------------------------------------------------------

LOOP_TIMEOUT = "loop_timeout"


def loop_timer(step: str, loop_seq: int, total_timeout_ms: int) -> StartTimer:
    """The timer of a loop's total budget, naming the run it is for (its loop.started)."""
    payload = {"kind": LOOP_TIMEOUT, "step": step, "loop_seq": loop_seq}
    return StartTimer(total_timeout_ms / 1000.0, payload)


def on_timer(engine: Engine, state: ExecutionState, turn: _Turn, event: Event) -> None:
    """A timer fired: a loop still running past its total budget stops and fails."""
    payload = event.payload
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
    engine._emit(
        state,
        turn,
        EventType.LOOP_TIMED_OUT,
        name,
        {"total_timeout_ms": budget, "completed": done, "total": run.total, "canceled": in_flight},
    )
    if in_flight:
        engine._emit(state, turn, EventType.TASK_CANCELED, None, {"task_ids": in_flight})
        turn.commands.append(CancelTasks(tuple(in_flight)))
    error = (
        f"TaskTimeoutError: the loop ran past its total budget of {budget} ms "
        f"({done} of {run.total} items done)"
    )
    loops.finish(engine, state, turn, step, error=error)


# --- helpers -------------------------------------------------------------------------------


def _refuse(
    engine: Engine,
    state: ExecutionState,
    turn: _Turn,
    *,
    action: str,
    step: str | None,
    reason: str,
    payload: Mapping[str, Any],
) -> None:
    refused: dict[str, Any] = {"action": action, "reason": reason, "by": payload.get("by")}
    if payload.get("message_id") is not None:
        refused["message_id"] = payload["message_id"]
    engine._emit(state, turn, EventType.OPERATOR_REFUSED, step, refused)


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
