"""Building a step's task: its tool rendered against the step's context, its sinks, its
secrets, its timeout and its ids.

Pure functions over a `Turn` (`noetl.engine.turn`) or the engine's `Facts` (no I/O):
templates are rendered, nothing is run. What a task holds is its own concern, shared by a
step's own dispatch (`noetl.engine.flow`), its loop items (`noetl.engine.loops`) and a
case's branches (`noetl.engine.case_actions`, which reuses the sinks); whether a step's
templates mention secrets or variables is found once, by the engine's `StepScan`
(`noetl.engine.scan`). A template that fails to render raises `TemplateError`, which the
caller turns into a failed step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from noetl.core import Task
from noetl.core.secrets import referenced
from noetl.dsl.model import Sink, Step, Tool
from noetl.dsl.render import render_spec
from noetl.errors import TemplateError

PIPELINE = "pipeline"  # a tool kind whose tasks are rendered on the worker

if TYPE_CHECKING:
    from noetl.engine.turn import Facts, Turn


def build(
    turn: Turn,
    step: Step,
    tool: Tool,
    bind: dict[str, Any],
    *,
    index: int | None = None,
    item: Any = None,
    key: Any = None,
) -> Task:
    """The task of a step's tool (of one loop item when `index` is given), first attempt."""
    engine, state = turn.engine, turn.state
    ctx = turn.ctx(step, bind, index=index, item=item, key=key)
    kind, spec, args = tool.kind, tool.spec, tool.args
    if kind == "workbook":
        task_def = engine.playbook.task(str(spec["name"]))
        kind, spec = task_def.tool.kind, task_def.tool.spec
        args = {**task_def.tool.args, **args}
    values = ctx.build()
    upstream = engine.playbook.upstream
    if kind == PIPELINE:
        # Its tasks are rendered where they run, one by one (noetl.worker.pipeline).
        rendered_spec = pipeline_spec(engine, spec)
        if tool is step.tool and engine.retry_rules[step.step].scope == "chain":
            # A retry of the step runs its whole chain again, from the first task.
            rendered_spec["restart_on_retry"] = True
        rendered_args: dict[str, Any] = {}
        context = ctx.tool_view(full=True) | variables(values)
        if step.loop is not None and index is not None:
            # upstream names the loop element `iter.<iterator>` too
            context["iter"] = {step.loop.element: item, **context.get("iter", {})}
    else:
        rendered_args = engine.renderer.render(args, values, field="args") if args else {}
        rendered_spec = render_spec(engine.renderer, kind, spec, values, literal_code=not upstream)
    sinks = result_sinks(engine, step, values)
    if kind != PIPELINE:
        context = ctx.tool_view(
            full=upstream and kind == "python",
            variables=upstream and engine.scan.reads_variables(step.step, spec, args, sinks),
        )
    secrets: set[str] = set()
    if engine.scan.may_reference_secrets(step.step, kind, spec, args):
        secrets = referenced(rendered_args) | referenced(rendered_spec)
    sinks_pool = engine.options.sinks_pool if sinks else None
    if sinks_pool is None:  # sinks handed off take their secrets with them
        for sink in sinks:
            secrets |= referenced(sink["spec"])
    # A step's second and later runs (a cycle of the graph) have ids and keys of their own.
    number = state.steps[step.step].run
    name = step.step if number == 1 else f"{step.step}.run{number}"
    suffix = f".{index}" if index is not None else ""
    item_key = index if key is None else key
    task_key = f"{state.execution_id}:{name}" + (f":{item_key}" if index is not None else "")
    timeout = tool.timeout_ms or (step.loop.item_timeout_ms if step.loop else None)
    if timeout is None and kind != "playbook":  # a child execution waits as long as it takes
        in_loop = engine.options.loop_item_timeout_ms if step.loop else None
        default = in_loop or engine.options.tool_timeout_ms
        if kind == PIPELINE:
            # The default bounds each of its tasks, not the whole (retries wait between).
            rendered_spec["task_timeout_ms"] = default
        else:
            timeout = default
    return Task(
        task_id=f"{state.execution_id}.{name}{suffix}",
        execution_id=state.execution_id,
        step=step.step,
        kind=kind,
        spec=rendered_spec,
        args=rendered_args,
        # upstream's python code reads the whole context (`context.get('<step>')`)
        context=context,
        key=task_key,
        index=index,
        attempt=1,
        timeout_ms=timeout,
        secrets=tuple(sorted(secrets)),
        sinks=sinks,
        # The worker needs the pick only to compute what its sinks write.
        pick=step.result.pick if sinks and step.result is not None else None,
        select=tuple(step.result.select) if step.result is not None else (),
        sinks_pool=sinks_pool,
    )


def pipeline_spec(engine: Facts, spec: dict[str, Any]) -> dict[str, Any]:
    """A pipeline's spec as its worker runs it: the tasks as written (templates and all),
    a `workbook` task replaced by the workbook's tool, and whether code and SQL are
    rendered (upstream NoETL's dialect) or taken literally."""
    tasks = []
    for written in spec.get("tasks") or []:
        task = written
        tool = task.get("tool") if isinstance(task, dict) else None
        if isinstance(tool, dict) and tool.get("kind") == "workbook":
            name = (tool.get("spec") or {}).get("name")
            called = engine.playbook.task(str(name)).tool
            tool = {
                "kind": called.kind,
                "spec": called.spec,
                "args": {**called.args, **(tool.get("args") or {})},
                **({"timeout_ms": called.timeout_ms} if called.timeout_ms else {}),
            }
            task = {**task, "tool": tool}
        tasks.append(task)
    return {"tasks": tasks, "render_code": engine.playbook.upstream}


def variables(values: dict[str, Any]) -> dict[str, Any]:
    """The execution's `ctx` and the iteration's `iter` variables, when the context has
    them, for the templates a pipeline renders on its worker."""
    out: dict[str, Any] = {}
    for name in ("ctx", "iter"):
        value = values.get(name)
        if isinstance(value, Mapping):
            out[name] = dict(value)
    return out


def result_sinks(engine: Facts, step: Step, values: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The step's `result.sink` entries as the worker runs them, specs rendered now."""
    if step.result is None or not step.result.sink:
        return ()
    return render_sinks(engine, step.result.sink, values, "result.sink")


def render_sinks(
    engine: Facts, entries: list[Sink], values: dict[str, Any], label: str
) -> tuple[dict[str, Any], ...]:
    """Sink entries as the worker runs them, specs rendered now (a TemplateError names
    `label[index]`).

    `args` is kept as a template: it may use `this` and `out`, which only the worker
    has. `policy.on_sink_fail: async_ignore` makes every sink best-effort; `fail_step`
    tries a sink without its own `retry` once. A sink without `retry` / `timeout_ms`
    gets the options' defaults."""
    policy = engine.policy
    all_async = policy.on_sink_fail == "async_ignore"
    default_retry = {"max_attempts": 1} if policy.on_sink_fail == "fail_step" else engine.sink_retry
    if default_retry is not None:
        default_retry = dict(default_retry)  # each task gets its own copy
    sinks: list[dict[str, Any]] = []
    for index, sink in enumerate(entries):
        try:
            spec = render_spec(engine.renderer, sink.kind, sink.spec, values)
        except TemplateError as exc:
            raise TemplateError(f"{label}[{index}]: {exc}") from None
        entry: dict[str, Any] = {
            "kind": sink.kind,
            "spec": spec,
            # the validator's default id (noetl.dsl.checks), so ids it checked are unique
            "id": sink.id or f"{sink.kind}_{index}",
            "async": sink.async_ or all_async,
            "timeout_ms": sink.timeout_ms or engine.options.sink_timeout_ms,
            "retry": sink.retry.model_dump(mode="json") if sink.retry else default_retry,
        }
        if sink.args is not None:
            entry["args"] = sink.args
        sinks.append(entry)
    return tuple(sinks)
