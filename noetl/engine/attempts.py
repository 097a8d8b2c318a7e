"""One attempt of a task, judged: its retry verdict (`noetl.engine.retry`) acted on, a
retry (`retry.started` and a `RequeueTask`), attempts that ran out (`retry.processed`),
and the dead letter of a task that failed for good (`task.dead_lettered`, with the
reason).

Pure functions over a `Turn` (no I/O), shared by a step's own tasks and its loop items
(`noetl.engine.outcomes`) and a case's tool and branches (`noetl.engine.cases`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from noetl.core import EventType, RequeueTask
from noetl.core.errors import UNDECODABLE_ERROR
from noetl.dsl.model import Condition, Step
from noetl.engine.retry import FINISH, Attempt, RetryAction, Verdict, jitter_key, requested
from noetl.engine.retry import assess as assess_rule
from noetl.errors import ErrorClass, error_class

if TYPE_CHECKING:
    from noetl.engine.turn import Facts, Turn

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


# --- retries -------------------------------------------------------------------------------


def judge(turn: Turn, done: Attempt, *, lease_lost: bool) -> Verdict | None:
    """The retry policy's verdict on an attempt, acted on: a retry is requeued (then None),
    attempts that ran out are recorded (`retry.processed`)."""
    if lease_lost:
        verdict = Verdict(RetryAction.EXHAUSTED, reason="lease_expired")
    else:
        verdict = assess(turn, done)
    if verdict.action is RetryAction.RETRY:
        retry(turn, done, verdict)
        return None
    if verdict.action is RetryAction.EXHAUSTED:
        exhausted(turn, done, verdict)
    return verdict


def settled(outcome: Mapping[str, Any], verdict: Verdict) -> tuple[bool, str | None]:
    """Whether an attempt that is not retried succeeded, and its error."""
    ok = bool(outcome.get("ok"))
    error = None if ok else str(outcome.get("error") or "tool failed")
    if verdict.error is not None:
        error = verdict.error if ok else f"{verdict.error} (the tool failed: {error})"
        ok = False
    return ok, error


def assess(turn: Turn, done: Attempt) -> Verdict:
    """The retry policy's verdict on the outcome of one attempt of a task (a retry a
    pipeline's rule asked for, or said ran out, is decided by that request)."""
    request = rule_request(done.outcome)
    if request is not None:
        return requested(request)
    step, index = done.step, done.index
    rule = done.rule or turn.engine.retry_rules[step.step]
    if rule.retry_when is None and done.outcome.get("ok"):
        return FINISH  # the common case, decided without building anything
    state = turn.state
    run = state.steps[step.step]

    def check(condition: Condition, names: Mapping[str, Any]) -> bool:
        item = run.items[index] if index is not None else None
        ctx = turn.ctx(step, run.bind, index=index, item=item)
        upstream = turn.engine.playbook.upstream  # an undefined name reads as false there
        return turn.engine.renderer.truthy(condition, ctx.build(**names), undefined_false=upstream)

    key = jitter_key(state.execution_id, step.step, done.number, index)
    return assess_rule(rule, done.outcome, done.number, check, step=step.step, key=key)


def rule_request(outcome: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The retry a pipeline's policy rule asked for in a failed outcome, if it did."""
    request = outcome.get("retry")
    if isinstance(request, Mapping) and not outcome.get("ok"):
        return request
    return None


def _max_attempts(turn: Turn, done: Attempt) -> Any:
    request = rule_request(done.outcome)
    if request is not None:
        return request.get("attempts")
    return (done.rule or turn.engine.retry_rules[done.step.step]).max_attempts


def _trigger_fields(turn: Turn, done: Attempt, verdict: Verdict) -> dict[str, Any]:
    """The retry block's `on` trigger that matched, and its `scope` when it is `chain`
    (the step's whole chain runs again)."""
    fields: dict[str, Any] = {}
    if verdict.trigger is not None:
        fields["trigger"] = verdict.trigger
    if rule_request(done.outcome) is None and verdict.reason not in ("case", "lease_expired"):
        rule = done.rule or turn.engine.retry_rules[done.step.step]
        if rule.scope == "chain":
            fields["scope"] = "chain"
    return fields


def _rule_fields(done: Attempt) -> dict[str, Any]:
    """Which task of a pipeline, and which try of it, a rule's retry is about."""
    request = rule_request(done.outcome)
    if request is None:
        return {}
    fields = {"task": request.get("task")}
    if "try" in request:
        fields["try"] = request.get("try")
    return fields


def retry(turn: Turn, done: Attempt, verdict: Verdict, *, restart: str | None = None) -> None:
    """Seed 001's `step_retry`: the same task runs again, once `delay_s` has passed. With
    `restart` (`case`), the step's chain runs again from its first task instead: the
    event says so and the caller starts it (noetl.engine.cases.restart_chain)."""
    payload: dict[str, Any] = {"task_id": done.task_id}
    if done.index is not None:
        payload["index"] = done.index
    payload.update(
        attempt=done.number + 1,
        max_attempts=_max_attempts(turn, done),
        delay_ms=round(verdict.delay_s * 1000),
        reason=verdict.reason,
    )
    payload.update(_trigger_fields(turn, done, verdict))
    payload.update(_rule_fields(done))
    payload.update(failure(done.outcome))
    if restart is not None:
        payload["restart"] = restart
    turn.emit(EventType.RETRY_STARTED, done.step.step, payload)
    if restart is None:
        turn.commands.append(RequeueTask(done.task_id, done.number + 1, verdict.delay_s))


def exhausted(turn: Turn, done: Attempt, verdict: Verdict) -> None:
    """Seed 001's `step_retry_exhausted`. It holds what a dead-letter entry needs: the
    task id (the message id), step (envelope), loop index and key, tool kind, attempts
    and the last error; the task itself is in the `step.started` or
    `loop.iteration.started` event that dispatched this task id."""
    name = done.step.step
    payload: dict[str, Any] = {"task_id": done.task_id}
    if done.index is not None:
        payload["index"] = done.index
        key = turn.state.steps[name].keys.get(done.index)
        if key is not None:
            payload["key"] = key
    payload.update(status="exhausted", reason=verdict.reason, attempts=done.number)
    if verdict.reason != "lease_expired":
        payload["max_attempts"] = _max_attempts(turn, done)
    payload.update(_trigger_fields(turn, done, verdict))
    payload.update(_rule_fields(done))
    payload["kind"] = done.kind or kind(turn.engine, done.step)
    payload.update(failure(done.outcome))
    if verdict.error is not None:
        payload["error"] = verdict.error
    turn.emit(EventType.RETRY_PROCESSED, name, payload)


# --- dead letters --------------------------------------------------------------------------


def dead_letter(
    turn: Turn,
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
        key = turn.state.steps[name].keys.get(done.index)
        if key is not None:
            payload["key"] = key
    payload.update(
        reason=dead_letter_reason(done.outcome, ran_out),
        attempts=done.number,
        kind=done.kind or kind(turn.engine, done.step),
        error=error or "tool failed",
        error_type=done.outcome.get("error_type"),
    )
    sink = failed_sink(done.outcome)
    if sink is not None:
        payload["sink_id"] = sink
    turn.emit(EventType.TASK_DEAD_LETTERED, name, payload)


def kind(engine: Facts, step: Step) -> str | None:
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
