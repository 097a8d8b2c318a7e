"""A task's outcome, decided by the engine: its retry verdict, the retry or the end of its
attempts, its dead letter, and the step (or loop item) it finishes.

Pure functions over an `Engine`, an `ExecutionState` and the current turn (no I/O). They
are apart from `noetl.engine.engine` because what happens between a task's result and its
step's end (retries, lost workers, dead letters) is a policy of its own, which a step's
`case` (`noetl.engine.cases`) reuses for its branches' tasks.

Retries (`noetl.engine.retry`): each task outcome is assessed with its step's retry policy;
a retry is `retry.started` plus a `RequeueTask` of the same task id with the next attempt
and a delay; attempts that run out give `retry.processed` (status `exhausted`), and the
task fails as any failed task does. A worker's lost lease runs the task again (the reclaim
counts as an attempt) up to `max_lease_expiries` in a row; then the task fails for good.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from noetl.core import Event, EventType, RequeueTask
from noetl.dsl.model import Condition, Step
from noetl.engine import cases, loops, recovery, variables
from noetl.engine.retry import FINISH, Attempt, RetryAction, Verdict, jitter_key
from noetl.engine.retry import assess as assess_rule
from noetl.errors import TemplateError

if TYPE_CHECKING:
    from noetl.engine.engine import Engine, _Turn
    from noetl.engine.state import ExecutionState


def on_lease_expired(engine: Engine, state: ExecutionState, turn: _Turn, event: Event) -> None:
    """A worker lost its lease (crashed, stalled): run the task again, up to a limit.

    The reclaim counts as an attempt; past `max_lease_expiries` expiries in a row (with
    no outcome in between) the task fails, and its retries end there."""
    task_id = event.payload.get("task_id")
    entry = state.tasks.get(task_id) if isinstance(task_id, str) else None
    if entry is None or not isinstance(task_id, str):
        return  # already finished or canceled
    expired = state.reclaims.get(task_id, 0) + 1
    if expired >= engine.max_lease_expiries:
        error = f"the worker's lease expired {expired} times (worker lost or stalled)"
        outcome = {
            "task_id": task_id,
            "ok": False,
            "error": error,
            "error_type": "LeaseExpired",
        }
        lost = Event(0, EventType.TOOL_PROCESSED, state.execution_id, turn.now, None, outcome)
        on_outcome(engine, state, turn, lost, lease_lost=True)
        return
    attempt = state.attempts.get(task_id, 1) + 1
    payload = {
        "task_id": task_id,
        "attempt": attempt,
        "worker_id": event.payload.get("worker_id"),
    }
    engine._emit(state, turn, EventType.TASK_RECLAIMED, entry[0], payload)
    turn.commands.append(RequeueTask(task_id, attempt))


def on_outcome(
    engine: Engine,
    state: ExecutionState,
    turn: _Turn,
    event: Event,
    *,
    lease_lost: bool = False,
) -> None:
    """A task's result (`tool.processed`): retry it, or finish its step or loop item."""
    task_id = event.payload.get("task_id")
    entry = state.tasks.get(task_id) if isinstance(task_id, str) else None
    if entry is None or not isinstance(task_id, str):
        return  # a late or duplicate result: discarded
    name, index = entry
    payload = dict(event.payload)
    if "ctx" in payload:
        accept_ctx(engine, state, payload)
    attempt = state.attempts.get(task_id, 1)
    if attempt > 1:
        payload.setdefault("attempt", attempt)  # a first attempt's payload stays as sent
    engine._emit(state, turn, EventType.TOOL_PROCESSED, name, payload)
    step = engine.graph.nodes[name].step
    done = Attempt(task_id, step, index, payload, attempt)
    if step.case and cases.on_outcome(engine, state, turn, step, done, lease_lost=lease_lost):
        return  # a branch's task, or the tool an `on_event` case evaluates
    verdict = judge(engine, state, turn, done, lease_lost=lease_lost)
    if verdict is None:
        return  # the task runs again
    ok, error = settled(payload, verdict)
    if not ok and engine.dead_letters:
        ran_out = verdict.reason if verdict.action is RetryAction.EXHAUSTED else None
        dead_letter(engine, state, turn, done, ran_out=ran_out, error=error)
    if index is None:
        engine._finish_step(state, turn, name, ok=ok, this=payload.get("this"), error=error)
    else:
        loops.record_item(
            engine, state, turn, step, index, ok=ok, this=payload.get("this"), error=error
        )
        loops.advance(engine, state, turn, step)


def accept_ctx(engine: Engine, state: ExecutionState, payload: dict[str, Any]) -> None:
    """The task's `ctx` patch (`Outcome.ctx`), read as top-level names and held to the
    bounds of `ctx` (in place). A patch that cannot be accepted is dropped and fails the
    task (`CtxRefused`, fatal: never retried): the step fails with the reason, the
    engine does not. Only an
    upstream NoETL playbook has `ctx`: elsewhere a patch is dropped."""
    raw = payload.pop("ctx")
    if not engine.playbook.upstream or not raw:
        return
    try:
        payload["ctx"] = variables.normalize_patch(state.ctx, raw)
    except TemplateError as exc:
        refused = f"the task's ctx variables were refused: {exc}"
        if not payload.get("ok") and payload.get("error"):
            refused = f"{payload['error']} ({refused})"
        payload.update(ok=False, error=refused, error_type="CtxRefused", retryable=False)


# --- retries -------------------------------------------------------------------------------


def judge(
    engine: Engine, state: ExecutionState, turn: _Turn, done: Attempt, *, lease_lost: bool
) -> Verdict | None:
    """The retry policy's verdict on an attempt, acted on: a retry is requeued (then None),
    attempts that ran out are recorded (`retry.processed`)."""
    if lease_lost:
        verdict = Verdict(RetryAction.EXHAUSTED, reason="lease_expired")
    else:
        verdict = assess(engine, state, done)
    if verdict.action is RetryAction.RETRY:
        retry(engine, state, turn, done, verdict)
        return None
    if verdict.action is RetryAction.EXHAUSTED:
        exhausted(engine, state, turn, done, verdict)
    return verdict


def settled(outcome: Mapping[str, Any], verdict: Verdict) -> tuple[bool, str | None]:
    """Whether an attempt that is not retried succeeded, and its error."""
    ok = bool(outcome.get("ok"))
    error = None if ok else str(outcome.get("error") or "tool failed")
    if verdict.error is not None:
        error = verdict.error if ok else f"{verdict.error} (the tool failed: {error})"
        ok = False
    return ok, error


def assess(engine: Engine, state: ExecutionState, done: Attempt) -> Verdict:
    """The retry policy's verdict on the outcome of one attempt of a task."""
    step, index = done.step, done.index
    rule = done.rule or engine.retry_rules[step.step]
    if rule.retry_when is None and done.outcome.get("ok"):
        return FINISH  # the common case, decided without building anything
    run = state.steps[step.step]

    def check(condition: Condition, names: Mapping[str, Any]) -> bool:
        item = run.items[index] if index is not None else None
        ctx = engine._ctx(state, step, run.bind, index=index, item=item)
        return engine.renderer.truthy(condition, ctx.build(**names))

    key = jitter_key(state.execution_id, step.step, done.number, index)
    return assess_rule(rule, done.outcome, done.number, check, step=step.step, key=key)


def retry(
    engine: Engine, state: ExecutionState, turn: _Turn, done: Attempt, verdict: Verdict
) -> None:
    """Seed 001's `step_retry`: the same task runs again, once `delay_s` has passed."""
    payload: dict[str, Any] = {"task_id": done.task_id}
    if done.index is not None:
        payload["index"] = done.index
    payload.update(
        attempt=done.number + 1,
        max_attempts=(done.rule or engine.retry_rules[done.step.step]).max_attempts,
        delay_ms=round(verdict.delay_s * 1000),
        reason=verdict.reason,
    )
    payload.update(failure(done.outcome))
    engine._emit(state, turn, EventType.RETRY_STARTED, done.step.step, payload)
    turn.commands.append(RequeueTask(done.task_id, done.number + 1, verdict.delay_s))


def exhausted(
    engine: Engine, state: ExecutionState, turn: _Turn, done: Attempt, verdict: Verdict
) -> None:
    """Seed 001's `step_retry_exhausted`. It holds what a dead-letter entry needs: the
    task id (the message id), step (envelope), loop index and key, tool kind, attempts
    and the last error; the task itself is in the `step.started` or
    `loop.iteration.started` event that dispatched this task id."""
    name = done.step.step
    payload: dict[str, Any] = {"task_id": done.task_id}
    if done.index is not None:
        payload["index"] = done.index
        key = state.steps[name].keys.get(done.index)
        if key is not None:
            payload["key"] = key
    payload.update(status="exhausted", reason=verdict.reason, attempts=done.number)
    if verdict.reason != "lease_expired":
        payload["max_attempts"] = (done.rule or engine.retry_rules[name]).max_attempts
    payload["kind"] = done.kind or kind(engine, done.step)
    payload.update(failure(done.outcome))
    if verdict.error is not None:
        payload["error"] = verdict.error
    engine._emit(state, turn, EventType.RETRY_PROCESSED, name, payload)


# --- dead letters --------------------------------------------------------------------------


def dead_letter(
    engine: Engine,
    state: ExecutionState,
    turn: _Turn,
    done: Attempt,
    *,
    ran_out: str | None,
    error: str | None,
) -> None:
    """`task.dead_lettered`: the task failed for good; the runtime writes its DLQ
    entry (message id = task id) from this event in the same transaction. `ran_out` is
    the retry verdict's reason when the attempts ran out (None when no retry was wanted)."""
    name = done.step.step
    payload: dict[str, Any] = {"task_id": done.task_id}
    if done.index is not None:
        payload["index"] = done.index
        key = state.steps[name].keys.get(done.index)
        if key is not None:
            payload["key"] = key
    payload.update(
        reason=recovery.dead_letter_reason(done.outcome, ran_out),
        attempts=done.number,
        kind=done.kind or kind(engine, done.step),
        error=error or "tool failed",
        error_type=done.outcome.get("error_type"),
    )
    sink = recovery.failed_sink(done.outcome)
    if sink is not None:
        payload["sink_id"] = sink
    engine._emit(state, turn, EventType.TASK_DEAD_LETTERED, name, payload)


def kind(engine: Engine, step: Step) -> str | None:
    """The kind of tool a step's tasks run (a workbook call: its task's tool)."""
    tool = step.tool
    if tool is None:
        return None
    if tool.kind == "workbook":
        try:
            return engine.playbook.task(str(tool.spec.get("name"))).tool.kind
        except KeyError:
            return tool.kind
    return tool.kind


def failure(outcome: dict[str, Any]) -> dict[str, Any]:
    """The error of a failed outcome, for retry events (nothing for a success)."""
    if outcome.get("ok"):
        return {}
    return {
        "error": str(outcome.get("error") or "tool failed"),
        "error_type": outcome.get("error_type"),
    }
