"""A loop step, decided by the engine: its collection, the window of items in flight, each
item's task and output, `until`, and how the step ends by its success rule.

Pure functions over a `Turn` (no I/O). A loop is a small state machine of its own within
a step (started, items dispatched while the window has room, each recorded, the step
finished once the window drains); the flow (`noetl.engine.flow`) hands a step over when it
dispatches one with a `loop` (`start`), and `noetl.engine.outcomes` when one of its
items' tasks has an outcome (`record_item`, then `advance`). A `case` re-enters at `begin`
(after an `on_entry` case) and reads `collected`; a loop with a `case` asks the turn
(`Turn.after_loop`) whether its case decides how the step ends. A loop's total budget is
a timer (`loop_timer`); when it fires (`noetl.engine.recovery`), `finish` ends the loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from noetl.core import EnqueueTask, EventType, StartTimer, StepStatus
from noetl.dsl.model import Step
from noetl.dsl.spilled import SpilledResult, is_spilled, lazy
from noetl.engine import tasks
from noetl.errors import TemplateError

if TYPE_CHECKING:
    from noetl.engine.state import StepRun
    from noetl.engine.turn import Turn

LOOP_TIMEOUT = "loop_timeout"  # the `kind` of a loop's total-budget timer


def start(turn: Turn, step: Step, bind: dict[str, Any]) -> None:
    """Dispatch a loop step: started, then its items."""
    turn.emit(EventType.STEP_STARTED, step.step, {"bind": bind})
    begin(turn, step, bind)


def begin(turn: Turn, step: Step, bind: dict[str, Any]) -> None:
    """Render the collection of a started loop step and dispatch its first items."""
    engine = turn.engine
    name = step.step
    loop = step.loop
    assert loop is not None
    try:
        items = engine.renderer.render(loop.collection, turn.ctx(step, bind).build())
    except TemplateError as exc:
        turn.finish_step(name, ok=False, error=f"loop.collection: {exc}")
        return
    if isinstance(items, SpilledResult) or is_spilled(items):
        # A result kept in the result store: the loop runs over the whole of it, never
        # over its envelope's fields.
        spilled = lazy(dict(items), engine.options.resolve)
        whole = spilled.whole() if isinstance(spilled, SpilledResult) else None
        if whole is None:
            ref = items.get("_ref")
            error = f"loop.collection: the spilled result {ref} cannot be read back here"
            turn.finish_step(name, ok=False, error=error)
            return
        items = whole
    if isinstance(items, dict):
        items = [{"key": k, "value": v} for k, v in items.items()]
    if not isinstance(items, list | tuple):
        got = type(items).__name__
        turn.finish_step(name, ok=False, error=f"loop.collection must be a list, got {got}")
        return
    payload: dict[str, Any] = {"items": list(items), "mode": loop.mode}
    if _templated(loop.mode) or _templated(loop.max_concurrency):
        try:
            payload.update(_window(turn, step, bind))
        except TemplateError as exc:
            turn.finish_step(name, ok=False, error=f"loop.spec: {exc}")
            return
    turn.emit(EventType.LOOP_STARTED, name, payload)
    budget = loop.total_timeout_ms or engine.options.loop_total_timeout_ms
    if budget and items:
        loop_seq = turn.state.steps[name].loop_seq
        turn.commands.append(loop_timer(name, loop_seq, budget))
    advance(turn, step)


def loop_timer(step: str, loop_seq: int, total_timeout_ms: int) -> StartTimer:
    """The timer of a loop's total budget, naming the run it is for (its loop.started)."""
    payload = {"kind": LOOP_TIMEOUT, "step": step, "loop_seq": loop_seq}
    return StartTimer(total_timeout_ms / 1000.0, payload)


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def _window(turn: Turn, step: Step, bind: dict[str, Any]) -> dict[str, Any]:
    """A loop's `mode` and `max_concurrency` written as templates (upstream NoETL's
    `spec.mode` / `spec.max_in_flight`), rendered once when the loop starts; the values
    travel in its `loop.started` event, so a replay windows it the same way."""
    loop = step.loop
    assert loop is not None
    engine = turn.engine
    values = turn.ctx(step, bind).build()
    mode = engine.renderer.render(loop.mode, values, field="loop.mode")
    if mode not in ("sequential", "parallel"):
        raise TemplateError(f"loop.mode must be sequential or parallel; got {mode!r}")
    out: dict[str, Any] = {"mode": mode}
    if loop.max_concurrency is not None:
        limit = engine.renderer.render(loop.max_concurrency, values, field="loop.max_concurrency")
        try:
            number = int(limit)
        except (TypeError, ValueError):
            number = 0
        if number < 1 or isinstance(limit, bool):
            raise TemplateError(f"loop.max_concurrency must be a positive integer; got {limit!r}")
        out["max_concurrency"] = number
    return out


def advance(turn: Turn, step: Step) -> None:
    """Dispatch items while the window has room; finish the loop when it has drained."""
    run = turn.state.steps[step.step]
    loop = step.loop
    assert loop is not None
    mode = run.loop_mode or loop.mode
    limit = run.loop_limit or loop.max_concurrency
    window = 1 if mode == "sequential" else (int(limit or 0) or len(run.items))
    while (
        run.status is StepStatus.RUNNING
        and not run.stopped
        and run.next_index < len(run.items)
        and run.in_flight < window
    ):
        start_item(turn, step, run.next_index)
    drained = run.stopped or run.next_index >= len(run.items)
    if run.status is StepStatus.RUNNING and run.in_flight == 0 and drained:
        finish(turn, step)


def start_item(turn: Turn, step: Step, index: int) -> None:
    """Start one loop item: its task, or its output at once (no tool, or an error)."""
    run = turn.state.steps[step.step]
    item = run.items[index]
    started: dict[str, Any] = {"index": index}
    error = None
    task = None
    try:
        key = item_key(turn, step, run.bind, index=index, item=item)
    except TemplateError as exc:
        key, error = None, f"loop.key: {exc}"
    if key is not None:
        started["key"] = key
    if error is None and step.tool is not None:
        try:
            task = tasks.build(turn, step, step.tool, run.bind, index=index, item=item, key=key)
        except TemplateError as exc:
            error = f"tool: {exc}"
    if task is not None:
        started["task"] = task.to_dict()
    turn.emit(EventType.LOOP_ITERATION_STARTED, step.step, started)
    if task is not None:
        turn.commands.append(EnqueueTask(task))
    elif error is not None:
        record_item(turn, step, index, ok=False, this=None, error=error)
    else:  # a loop without a tool: each output is the item itself
        record_item(turn, step, index, ok=True, this=item, error=None)


def item_key(
    turn: Turn,
    step: Step,
    bind: dict[str, Any],
    *,
    index: int,
    item: Any,
) -> Any:
    """The item's rendered `loop.key` (None without one)."""
    if step.loop is None or step.loop.key is None:
        return None
    ctx = turn.ctx(step, bind, index=index, item=item)
    return turn.engine.renderer.render(step.loop.key, ctx.build())


def record_item(
    turn: Turn,
    step: Step,
    index: int,
    *,
    ok: bool,
    this: Any,
    error: str | None,
) -> None:
    """`loop.iteration.finished`: an item's output (or error), and whether `until` stops
    the loop."""
    run = turn.state.steps[step.step]
    assert step.loop is not None
    item = run.items[index]
    out = collect_key = None
    if ok:
        try:
            out, collect_key = turn.outputs(step, this, index, item)
        except TemplateError as exc:
            ok, error = False, str(exc)
    payload: dict[str, Any] = {"index": index, "ok": ok}
    if ok:
        payload["out"] = out
        if collect_key is not None:
            payload["collect_key"] = collect_key
    else:
        payload["error"] = error
    if step.loop.until is not None and not run.stopped:
        try:
            ctx = turn.ctx(step, run.bind, index=index, item=item)
            names = ctx.build(this=this, out=out)
            upstream = turn.engine.playbook.upstream  # an undefined name reads as false there
            if turn.engine.renderer.truthy(step.loop.until, names, undefined_false=upstream):
                payload["stop"] = True
        except TemplateError as exc:
            payload["stop"] = True
            payload["until_error"] = str(exc)
    turn.emit(EventType.LOOP_ITERATION_FINISHED, step.step, payload)


def finish(turn: Turn, step: Step, *, error: str | None = None) -> None:
    """Finish a loop step by its success rule, or failed with `error` when given."""
    run = turn.state.steps[step.step]
    assert step.loop is not None
    ratio = step.loop.min_success_ratio
    if error is not None:
        ok = False
    elif run.completed == 0:
        ok = True
    elif ratio is None:
        ok = run.failed == 0
    else:
        ok = run.succeeded / run.completed >= ratio
    outs = run.results.outputs(run.next_index)
    turn.emit(
        EventType.LOOP_FINISHED,
        step.step,
        {
            "total": run.total,
            "succeeded": run.succeeded,
            "failed": run.failed,
            "stopped": run.stopped,
        },
    )
    if not ok and error is None:
        error = f"{run.failed} of {run.completed} loop items failed"
    if step.case:
        outcome: dict[str, Any] = {"ok": ok, "this": outs}
        if error is not None:
            outcome["error"] = error
        if turn.after_loop(step, outcome):
            return  # its `on_event` case decides how the step ends
    turn.finish_step(
        step.step,
        ok=ok,
        result=outs,
        collected=collected(run) if ok else None,
        error=error,
        picked=True,
    )


def collected(run: StepRun) -> list[tuple[str | None, Any]]:
    """The outputs (with their `collect.key`) of a loop's successful items, in order."""
    return run.results.collected(run.next_index)
