"""A task's outcome, decided by the engine: the handlers of `tool.processed` and
`task.lease_expired` (the engine's table maps each to one). The outcome is judged by its
retry policy (`noetl.engine.attempts`: a retry, the end of its attempts, its dead
letter), then finishes its step or loop item; a step's `case` (`noetl.engine.cases`)
takes the outcomes of its branches' tasks and of the tool it evaluates.

Pure functions over a `Turn` (no I/O).

Retries (`noetl.engine.retry`): each task outcome is assessed with its step's retry policy;
a retry is `retry.started` plus a `RequeueTask` of the same task id with the next attempt
and a delay; attempts that run out give `retry.processed` (status `exhausted`), and the
task fails as any failed task does. A worker's lost lease runs the task again (the reclaim
counts as an attempt) up to `max_lease_expiries` in a row; then the task fails for good.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from noetl.core import Event, EventType, RequeueTask
from noetl.engine import attempts, case_chain, cases, handoff, loops, variables
from noetl.engine.retry import Attempt, RetryAction
from noetl.errors import TemplateError

if TYPE_CHECKING:
    from noetl.engine.turn import Turn


def on_lease_expired(turn: Turn, event: Event) -> None:
    """A worker lost its lease (crashed, stalled): run the task again, up to a limit.

    The reclaim counts as an attempt; past `max_lease_expiries` expiries in a row (with
    no outcome in between) the task fails, and its retries end there."""
    state = turn.state
    task_id = event.payload.get("task_id")
    entry = state.tasks.get(task_id) if isinstance(task_id, str) else None
    if entry is None or not isinstance(task_id, str):
        return  # already finished or canceled
    expired = state.reclaims.get(task_id, 0) + 1
    if expired >= turn.engine.max_lease_expiries:
        error = f"the worker's lease expired {expired} times (worker lost or stalled)"
        outcome = {
            "task_id": task_id,
            "ok": False,
            "error": error,
            "error_type": "LeaseExpired",
        }
        lost = Event(0, EventType.TOOL_PROCESSED, state.execution_id, turn.now, None, outcome)
        on_outcome(turn, lost, lease_lost=True)
        return
    attempt = state.attempts.get(task_id, 1) + 1
    payload = {
        "task_id": task_id,
        "attempt": attempt,
        "worker_id": event.payload.get("worker_id"),
    }
    turn.emit(EventType.TASK_RECLAIMED, entry[0], payload)
    turn.commands.append(RequeueTask(task_id, attempt))


def on_outcome(turn: Turn, event: Event, *, lease_lost: bool = False) -> None:
    """A task's result (`tool.processed`): retry it, or finish its step or loop item."""
    state = turn.state
    task_id = event.payload.get("task_id")
    entry = state.tasks.get(task_id) if isinstance(task_id, str) else None
    if entry is None or not isinstance(task_id, str):
        return  # a late or duplicate result: discarded
    name, index = entry
    payload = dict(event.payload)
    if "ctx" in payload:
        accept_ctx(turn, payload)
    attempt = state.attempts.get(task_id, 1)
    if attempt > 1:
        payload.setdefault("attempt", attempt)  # a first attempt's payload stays as sent
    turn.emit(EventType.TOOL_PROCESSED, name, payload)
    if turn.state.deferred and handoff.hand_off(turn, task_id, payload):
        return  # its sinks run next, in a task of their own (noetl.engine.handoff)
    engine = turn.engine
    step = engine.graph.nodes[name].step
    done = Attempt(task_id, step, index, payload, attempt)
    if step.case and cases.on_outcome(turn, step, done, lease_lost=lease_lost):
        return  # a branch's task, or the tool an `on_event` case evaluates
    if step.case and case_chain.restart(turn, step, done, lease_lost=lease_lost):
        return  # the step's chain runs again, its case first
    verdict = attempts.judge(turn, done, lease_lost=lease_lost)
    if verdict is None:
        return  # the task runs again
    ok, error = attempts.settled(payload, verdict)
    if not ok and engine.dead_letters:
        ran_out = verdict.reason if verdict.action is RetryAction.EXHAUSTED else None
        attempts.dead_letter(turn, done, ran_out=ran_out, error=error)
    if index is None:
        turn.finish_step(name, ok=ok, this=payload.get("this"), error=error)
    else:
        loops.record_item(turn, step, index, ok=ok, this=payload.get("this"), error=error)
        loops.advance(turn, step)


def accept_ctx(turn: Turn, payload: dict[str, Any]) -> None:
    """The task's `ctx` patch (`Outcome.ctx`), read as top-level names and held to the
    bounds of `ctx` (in place). A patch that cannot be accepted is dropped and fails the
    task (`CtxRefused`, fatal: never retried): the step fails with the reason, the
    engine does not. Only an
    upstream NoETL playbook has `ctx`: elsewhere a patch is dropped."""
    raw = payload.pop("ctx")
    if not turn.engine.playbook.upstream or not raw:
        return
    try:
        payload["ctx"] = variables.normalize_patch(turn.state.ctx, raw)
    except TemplateError as exc:
        refused = f"the task's ctx variables were refused: {exc}"
        if not payload.get("ok") and payload.get("error"):
            refused = f"{payload['error']} ({refused})"
        payload.update(ok=False, error=refused, error_type="CtxRefused", retryable=False)
