"""A step's `case` (seed 004 section 2.1): branches of a condition and actions, decided by
the engine. Pure functions over a `Turn`; the flow (`noetl.engine.flow`) and the outcome
handler (`noetl.engine.outcomes`) call the four hooks below only for a step that has a
`case`.

When (`spec.eval_mode`; when not given, `on_event` for a step with a tool and `on_entry`
for one without, as `Step.case_eval_mode` says):

* `on_event`: when the step's own tool has finished (after its own retry policy; a loop:
  when its items are done), with the outcome visible as `this` / `result`, `status_code`,
  `success`, `error`, ... (the names `retry_when` sees). A `retry` branch runs the tool
  again, and the case is evaluated again (a new round) on the outcome of that attempt.
* `on_entry`: when the step is dispatched, against its context (after `bind`). The
  branches act first; the step's own tool (or loop) runs once their tasks are done, so it
  sees what they saved. A `fail`, a `skip` or a failed branch task ends the step before
  its tool runs.

Which branches act: conditions are evaluated in `spec.branch_order` (written order, or by
`priority`, lowest first); `exclusive` (the default) acts on the first match only,
`inclusive` on every match, in order. A branch acts at most once per step run (a `retry`
branch once per attempt). `fail`, `skip` and `retry` end the round: later matches are
suppressed; under `next_policy: end_step` so does the first branch that routes.

Acting (noetl.engine.case_actions): `set`, then `tool` (a task of the step, with its own
id, retries, sinks and dead letter, as any task's (noetl.engine.attempts); `result`
handles its output) or, without a tool, `result` / `sink` over the step's output; then
the verdict and the routing intent.

The step finishes once every task it started is done, and routes (`route`): `end_step`
takes the first routing branch's `next` instead of the step's own; `defer` takes every
routing branch's `next`, then the step's own; `break_chain` takes nothing once a branch
acted. A branch's edge fires when its own `when` (if any) holds, unless the branch's task
failed; the step's own edges follow the usual rules.

Events: `case.started`, `case.evaluated`, `case.branch.started` (one per acting branch),
`case.branch.finished` (a branch task's final outcome), `tool.started` (the step's own
task after an `on_entry` case), `step.skipped` (reason `case`), and `next.evaluated` with
the policy, the winner branch and the suppressed branches. Every value the fold needs is
in them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from noetl.core import EnqueueTask, EventType, RequeueTask, StepStatus
from noetl.dsl.model import Step
from noetl.engine import attempts, loops, tasks
from noetl.engine.case_actions import Act, Scope, act, outputs
from noetl.engine.case_plan import BranchPlan
from noetl.engine.retry import (
    Attempt,
    RetryAction,
    RetryRule,
    Verdict,
    backoff_delay,
    jitter_key,
    retry_names,
)
from noetl.errors import TemplateError

if TYPE_CHECKING:
    from noetl.engine.state import CaseRun
    from noetl.engine.turn import Turn


# --- the engine's hooks --------------------------------------------------------------------


def enter(turn: Turn, step: Step, bind: dict[str, Any]) -> None:
    """Dispatch a step with an `on_entry` case: started, its case evaluated, then (once its
    branch tasks are done) its tool or loop, unless the case ended it."""
    scope = _scope(turn, step)
    turn.emit(EventType.STEP_STARTED, step.step, {"bind": bind})
    _round(scope, scope.values(), {"trigger": EventType.STEP_STARTED.value})
    proceed(scope)


def on_outcome(turn: Turn, step: Step, done: Attempt, *, lease_lost: bool) -> bool:
    """An accepted outcome of a task of a step with a case. True when handled here (a
    branch's task; the tool of an `on_event` case); False for the engine's usual path."""
    scope = _scope(turn, step)
    case = scope.run.case
    if case is not None and done.task_id in case.tasks:
        branch = scope.plan.branches[case.tasks[done.task_id]]
        done = Attempt(
            done.task_id, step, None, done.outcome, done.number, branch.tool_rule, branch.kind
        )
        _branch_outcome(scope, branch, done, lease_lost)
        return True
    if scope.plan.on_entry or done.index is not None:
        return False  # the step's tool after its case; a loop item
    _tool_outcome(scope, done, lease_lost)
    return True


def rerun(turn: Turn, step: Step) -> None:
    """The step's chain runs again (a retry with `scope: chain`, noetl.engine.case_chain):
    its `on_entry` case acts again, then its tool runs with the next attempt."""
    scope = _scope(turn, step)
    _round(scope, scope.values(), {"trigger": EventType.RETRY_STARTED.value})
    proceed(scope)


def after_loop(turn: Turn, step: Step, outcome: dict[str, Any]) -> bool:
    """A loop step's items are done (`outcome`: ok, `this` the list of their outputs, and
    the error): its `on_event` case is evaluated on it. False (an `on_entry` case,
    evaluated already) lets the loop finish as usual."""
    scope = _scope(turn, step)
    if scope.plan.on_entry:
        return False
    values = scope.values(**_names(scope, outcome, 1))
    _round(scope, values, {"trigger": EventType.LOOP_FINISHED.value, "outcome": outcome})
    proceed(scope)
    return True


def route(turn: Turn, step: Step, ok: bool) -> None:
    """`next.evaluated` of a step whose case was evaluated: the routes of its branches and
    of its own `next`, as its `next_policy` says."""
    engine = turn.engine
    scope = _scope(turn, step)
    case = scope.run.case
    assert case is not None
    skipped = scope.run.status is StepStatus.SKIPPED
    policy = scope.plan.spec.next_policy
    routes: list[int] = []
    dropped: list[int] = []
    own = not skipped
    if policy == "break_chain" and case.fired:
        own, dropped = False, list(case.routes)
    elif policy == "end_step" and case.routes:
        own, routes = False, case.routes[:1]
    elif policy == "defer":
        routes = list(case.routes)
    ctx = _lazy(lambda: turn.ctx(step).build())
    taken: list[str] = []  # the branches' routes first, then the step's own
    branch_edges = _branch_edges(scope, case, routes, ctx, taken)
    edges = _own_edges(scope, ok, ctx, taken) if own else []
    payload: dict[str, Any] = {"mode": step.next.mode if step.next else "inclusive"}
    payload["taken"] = taken
    if edges:
        payload["edges"] = edges
    if branch_edges:
        payload["branch_edges"] = branch_edges
    payload["policy"] = policy
    payload["winner_branch"] = routes[0] if policy == "end_step" and routes else None
    suppressed = [b for b in case.suppressed if b not in case.fired]
    payload["suppressed_branches"] = suppressed + dropped
    unhandled = not ok and not skipped and not taken
    if unhandled:
        payload["on_step_fail"] = engine.policy.on_step_fail
        if engine.policy.on_step_fail == "halt":
            payload["unhandled_failure"] = True
    turn.emit(EventType.NEXT_EVALUATED, step.step, payload)
    for target in taken:
        turn.calls.append((target, step.step))
    if unhandled:
        turn.apply_failure_policy(step.step)


# --- going on ------------------------------------------------------------------------------


def proceed(scope: Scope) -> None:
    """Go on once nothing of the step is in flight: start its body (after an `on_entry`
    case) or finish it (after an `on_event` case), as the case's verdict says."""
    turn, step = scope.turn, scope.step
    run = scope.run
    case = run.case
    if run.in_flight or run.status is not StepStatus.RUNNING or case is None:
        return  # branch tasks (or a retried tool) are still running
    verdict = case.verdict or {}
    if verdict.get("action") == "skip":
        skipped = {"reason": "case", "branch": verdict["branch"]}
        turn.emit(EventType.STEP_SKIPPED, step.step, skipped)
        turn.route(step, True)
        return
    error: str | None = verdict.get("error")
    if error is None:  # the first branch (in acting order) whose task failed for good
        error = next((case.failed[b] for b in case.fired if b in case.failed), None)
    if scope.plan.on_entry:
        if error is not None:
            turn.finish_step(step.step, ok=False, error=error)
        else:
            _start_body(scope)
        return
    outcome = case.outcome or {}
    ok = bool(outcome.get("ok")) and error is None
    if not ok and error is None:
        error = str(outcome.get("error") or "tool failed")
    if step.loop is None:
        turn.finish_step(step.step, ok=ok, this=outcome.get("this"), error=error)
        return
    turn.finish_step(
        step.step,
        ok=ok,
        result=outcome.get("this"),
        collected=loops.collected(run) if ok else None,
        error=error,
        picked=True,
    )


def _start_body(scope: Scope) -> None:
    """After an `on_entry` case: the step's loop, its tool (`tool.started`), or, without
    either, its end."""
    turn, step = scope.turn, scope.step
    bind = scope.run.bind
    if step.loop is not None:
        loops.begin(turn, step, bind)
        return
    if step.tool is None:
        turn.finish_step(step.step, ok=True, this=None)
        return
    try:
        task = tasks.build(turn, step, step.tool, bind)
    except TemplateError as exc:
        turn.finish_step(step.step, ok=False, error=f"tool: {exc}")
        return
    # After a retry that ran the chain again (noetl.engine.case_chain): its attempt.
    attempt = turn.state.attempts.get(task.task_id, 1)
    if attempt > 1:
        task = dataclasses.replace(task, attempt=attempt)
    turn.emit(EventType.TOOL_STARTED, step.step, {"task": task.to_dict()})
    if attempt > 1:  # its row is there from the attempt before: it runs again
        turn.commands.append(RequeueTask(task.task_id, attempt, 0.0, task=task))
    else:
        turn.commands.append(EnqueueTask(task))


# --- outcomes ------------------------------------------------------------------------------


def _tool_outcome(scope: Scope, done: Attempt, lease_lost: bool) -> None:
    """The step's own tool finished an attempt: its retry policy first, then the case on the
    final outcome; the task is dead-lettered only when the case does not run it again."""
    turn = scope.turn
    verdict = attempts.judge(turn, done, lease_lost=lease_lost)
    if verdict is None:
        return  # retried by the step's own policy
    ok, error = attempts.settled(done.outcome, verdict)
    outcome: dict[str, Any] = {"ok": ok, "this": done.outcome.get("this")}
    if not ok:
        outcome.update(error=error, error_type=done.outcome.get("error_type"))
    values = scope.values(**_names(scope, {**done.outcome, **outcome}, done.number))
    trigger = {
        "trigger": EventType.TOOL_PROCESSED.value,
        "task_id": done.task_id,
        "attempt": done.number,
        "outcome": outcome,
    }
    decided = _round(scope, values, trigger, done=done)
    if decided.get("action") == "retry" and not decided.get("exhausted"):
        return  # the tool runs again; the case is evaluated on that attempt's outcome
    exhausted = verdict.reason if verdict.action is RetryAction.EXHAUSTED else None
    if decided.get("exhausted"):
        ok, error, exhausted = False, decided["error"], "case"
    if not ok and turn.engine.dead_letters:
        attempts.dead_letter(turn, done, ran_out=exhausted, error=error)
    proceed(scope)


def _branch_outcome(scope: Scope, branch: BranchPlan, done: Attempt, lease_lost: bool) -> None:
    """A branch's task finished an attempt: retried by its tool's policy, else its output
    saved (`result`) or its failure recorded (the step then fails, once it can finish)."""
    engine = scope.engine
    verdict = attempts.judge(scope.turn, done, lease_lost=lease_lost)
    if verdict is None:
        return
    ok, error = attempts.settled(done.outcome, verdict)
    if not ok and engine.dead_letters:
        exhausted = verdict.reason if verdict.action is RetryAction.EXHAUSTED else None
        attempts.dead_letter(scope.turn, done, ran_out=exhausted, error=error)
    finished: dict[str, Any] = {"branch": branch.index, "task_id": done.task_id, "ok": ok}
    what = "tool" if branch.tool is not None else "sink"
    if ok and branch.tool is not None:
        try:
            out, saved = outputs(engine, branch.result, done.outcome.get("this"), scope.values())
        except TemplateError as exc:
            ok, error = False, str(exc)
        else:
            finished["result"] = out
            if saved:
                finished["context"] = saved
    if not ok:
        finished.update(ok=False, error=f"case[{branch.index}].then.{what}: {error}")
    scope.turn.emit(EventType.CASE_BRANCH_FINISHED, scope.name, finished)
    proceed(scope)


# --- one round of evaluation ---------------------------------------------------------------


def _round(
    scope: Scope,
    values: dict[str, Any],
    trigger: dict[str, Any],
    *,
    done: Attempt | None = None,
) -> dict[str, Any]:
    """Evaluate the case once and make its branches act; returns the round's verdict."""
    turn, plan = scope.turn, scope.plan
    prior = scope.run.case
    number = 1 if prior is None else prior.round + 1
    started = {"round": number, "trigger": trigger.pop("trigger"), **plan.header(), **trigger}
    turn.emit(EventType.CASE_STARTED, scope.name, started)
    case = scope.run.case
    assert case is not None
    matched, errors, already = _match(scope, case, values)
    fired: list[int] = []
    suppressed: list[int] = []
    routes: list[int] = []
    acts: list[Act] = []
    verdict: dict[str, Any] | None = None
    end_step = plan.spec.next_policy == "end_step"
    ended = end_step and bool(case.routes)
    for index in matched:
        if verdict is not None or ended:
            suppressed.append(index)
            continue
        fired.append(index)
        branch = plan.branches[index]
        acted = act(scope, branch, values, number, case)
        acts.append(acted)
        if acted.error is not None:
            verdict = {"branch": index, "action": "error", "error": acted.error}
        elif branch.verdict is not None:
            verdict = _verdict(branch, case, done)
        if acted.error is None and branch.routes:
            routes.append(index)
            ended = end_step
    evaluated: dict[str, Any] = {"round": number, "mode": plan.spec.case_mode}
    evaluated.update(order=list(plan.order), matched=matched, fired=fired, suppressed=suppressed)
    for key, value in (("already_fired", already), ("errors", errors), ("routes", routes)):
        if value:
            evaluated[key] = value
    if verdict is not None:
        evaluated["verdict"] = verdict
    turn.emit(EventType.CASE_EVALUATED, scope.name, evaluated)
    for acted in acts:
        turn.emit(EventType.CASE_BRANCH_STARTED, scope.name, acted.payload)
        if acted.task is not None:
            turn.commands.append(EnqueueTask(acted.task))
    if verdict is not None and verdict["action"] == "retry" and done is not None:
        _case_retry(scope, plan.branches[verdict["branch"]], done, verdict)
    return verdict or {}


def _match(
    scope: Scope, case: CaseRun, values: dict[str, Any]
) -> tuple[list[int], list[dict[str, Any]], list[int]]:
    """The branches whose `when` holds, in order (exclusive: the first only), the conditions
    that could not be evaluated, and the branches passed over because they acted already."""
    plan = scope.plan
    exclusive = plan.spec.case_mode == "exclusive"
    matched: list[int] = []
    errors: list[dict[str, Any]] = []
    already: list[int] = []
    for index in plan.order:
        branch = plan.branches[index]
        if index in case.fired and branch.verdict != "retry":
            already.append(index)  # at most once per step run
            continue
        try:
            hit = scope.engine.renderer.truthy(branch.when, values)
        except TemplateError as exc:
            errors.append({"branch": index, "error": f"case[{index}].when: {exc}"})
            continue
        if hit:
            matched.append(index)
            if exclusive:
                break
    return matched, errors, already


def _verdict(branch: BranchPlan, case: CaseRun, done: Attempt | None) -> dict[str, Any]:
    """How an acting branch ends the step: fail, skip, or run the step's tool again."""
    index = branch.index
    if branch.verdict == "fail":
        return {"branch": index, "action": "fail", "error": branch.fail_message}
    if branch.verdict == "skip":
        return {"branch": index, "action": "skip"}
    rule = branch.retry_rule
    assert rule is not None
    if done is None:
        what = "on entry" if case.outcome is None else "after a loop"
        error = f"case[{index}].then.retry: there is no tool attempt to retry {what}"
        return {"branch": index, "action": "error", "error": error}
    if done.number < rule.max_attempts:
        return {"branch": index, "action": "retry"}
    error = f"case[{index}].then.retry: still wanted after {done.number} attempts"
    outcome = case.outcome or {}
    if not outcome.get("ok"):
        error += f" (the tool failed: {outcome.get('error')})"
    return {"branch": index, "action": "retry", "exhausted": True, "error": error}


def _case_retry(
    scope: Scope, branch: BranchPlan, done: Attempt, verdict: Mapping[str, Any]
) -> None:
    """The step's tool runs again (same task, next attempt, the action's backoff), or the
    action's attempts are used up (`retry.processed`, reason `case`)."""
    rule = branch.retry_rule
    assert rule is not None
    attempt = Attempt(done.task_id, done.step, None, done.outcome, done.number, rule)
    if verdict.get("exhausted"):
        ran_out = Verdict(RetryAction.EXHAUSTED, reason="case", error=verdict["error"])
        attempts.exhausted(scope.turn, attempt, ran_out)
        return
    key = jitter_key(scope.state.execution_id, scope.name, done.number)
    again = Verdict(RetryAction.RETRY, reason="case", delay_s=backoff_delay(rule, done.number, key))
    attempts.retry(scope.turn, attempt, again)


# --- routing -------------------------------------------------------------------------------


def _own_edges(
    scope: Scope, ok: bool, ctx: Callable[[], dict[str, Any]], taken: list[str]
) -> list[dict[str, Any]]:
    """The step's own `next` edges, fired by the usual rules."""
    step = scope.step
    exclusive = step.next is not None and step.next.mode == "exclusive"
    evaluated: list[dict[str, Any]] = []
    for edge in step.edges:
        fires, note = scope.turn.edge_fires(edge.when, ok, ctx())
        evaluated.append({"to": edge.step, "fired": fires, **note})
        if fires:
            if edge.step not in taken:
                taken.append(edge.step)
            if exclusive:
                break
    return evaluated


def _branch_edges(
    scope: Scope,
    case: CaseRun,
    routes: list[int],
    ctx: Callable[[], dict[str, Any]],
    taken: list[str],
) -> list[dict[str, Any]]:
    """The `next` of each routing branch (whose own `when` held when it acted): an edge
    fires when its `when`, if any, holds, unless the branch's task failed."""
    evaluated: list[dict[str, Any]] = []
    for index in routes:
        block = scope.plan.branches[index].then.next
        assert block is not None
        failed = index in case.failed
        for edge in block.to:
            fires, note = (False, {}) if failed else scope.turn.edge_fires(edge.when, True, ctx())
            evaluated.append({"branch": index, "to": edge.step, "fired": fires, **note})
            if fires:
                if edge.step not in taken:
                    taken.append(edge.step)
                if block.mode == "exclusive":
                    break
    return evaluated


# --- helpers -------------------------------------------------------------------------------


def _scope(turn: Turn, step: Step) -> Scope:
    return Scope(turn, step, turn.engine.cases[step.step])


def _names(scope: Scope, outcome: Mapping[str, Any], attempt: int) -> dict[str, Any]:
    """What an `on_event` case sees of an outcome: the names `retry_when` sees."""
    engine = scope.engine
    rule = engine.retry_rules.get(scope.name) or RetryRule.of_defaults(engine.retry_defaults)
    return retry_names(outcome, attempt, rule, scope.name)


def _lazy(build: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """`build()`, called once and only if needed."""
    cache: list[dict[str, Any]] = []

    def get() -> dict[str, Any]:
        if not cache:
            cache.append(build())
        return cache[0]

    return get
