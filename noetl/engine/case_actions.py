"""What a case branch does when it acts: the values it sets and saves, and the task of its
tool or sinks (see noetl.engine.cases; sinks are rendered as a step's are, by
noetl.engine.tasks). Pure functions over a `Scope` (the decision's `Turn`, the step and
its case's plan): templates are rendered, nothing is run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from noetl.core import Task
from noetl.core.secrets import referenced
from noetl.dsl.model import Result, Step
from noetl.dsl.render import render_spec
from noetl.engine import tasks
from noetl.engine.case_plan import BranchPlan, CasePlan
from noetl.engine.context import collect_into
from noetl.errors import TemplateError

if TYPE_CHECKING:
    from noetl.engine.state import CaseRun, ExecutionState, StepRun
    from noetl.engine.turn import Facts, Turn


@dataclass(frozen=True, slots=True)
class Scope:
    """One step's case within one decision: the turn, the step and its case's plan."""

    turn: Turn
    step: Step
    plan: CasePlan

    @property
    def engine(self) -> Facts:
        return self.turn.engine

    @property
    def state(self) -> ExecutionState:
        return self.turn.state

    @property
    def name(self) -> str:
        return self.step.step

    @property
    def run(self) -> StepRun:
        return self.turn.state.steps[self.step.step]

    def values(self, **names: Any) -> dict[str, Any]:
        """What the step's templates see (with its `bind` values), plus `names`."""
        return self.turn.ctx(self.step, self.run.bind).build(**names)


@dataclass(frozen=True, slots=True)
class Act:
    """What one branch did: its `case.branch.started` payload, its task, and the error of
    an action that could not be rendered (then nothing of the branch applies)."""

    payload: dict[str, Any]
    task: Task | None
    error: str | None


def act(
    scope: Scope, branch: BranchPlan, values: dict[str, Any], number: int, case: CaseRun
) -> Act:
    """Make a branch act in round `number`. `values` are the case's template names; what the
    branch sets and saves is added to them, for the branches after it."""
    payload: dict[str, Any] = {
        "branch": branch.index,
        "round": number,
        "actions": list(branch.actions),
    }
    updates: dict[str, Any] = {}
    task = None
    try:
        for key, raw in (branch.then.set or {}).items():
            try:
                updates[key] = scope.engine.renderer.render(raw, values)
            except TemplateError as exc:
                raise TemplateError(f"set.{key}: {exc}") from None
            values[key] = updates[key]
        if branch.tool is not None:
            task = branch_task(scope, branch, values, number)
        elif branch.result is not None or branch.sinks:
            if case.outcome is None:
                what = "result" if branch.result is not None else "sink"
                raise TemplateError(
                    f"{what}: there is no output on entry; give the branch a tool, or "
                    f"evaluate the case on_event"
                )
            this = case.outcome.get("this")
            out, saved = outputs(scope.engine, branch.result, this, values)
            updates.update(saved)
            values.update(saved)
            if branch.sinks:
                task = sink_task(scope, branch, values, out, number)
    except TemplateError as exc:
        error = f"case[{branch.index}].then.{exc}"
        payload["error"] = error
        return Act(payload, None, error)
    if updates:
        payload["context"] = updates
    if task is not None:
        payload["task"] = task.to_dict()
    return Act(payload, task, None)


def outputs(
    engine: Facts, result: Result | None, this: Any, values: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """`out` (`result.pick` over `this`) and the context values its `as` and `collect` save.
    A TemplateError names the key that failed."""
    if result is None:
        return this, {}
    out = this
    if result.pick is not None:
        try:
            out = engine.renderer.render(result.pick, {**values, "this": this})
        except TemplateError as exc:
            raise TemplateError(f"result.pick: {exc}") from None
    saved: dict[str, Any] = {}
    if result.as_:
        saved[result.as_] = out
    collect = result.collect
    if collect is not None:
        key = None
        if collect.mode == "map":
            names = {**values, "this": this, "out": out}
            try:
                key = str(engine.renderer.render(collect.key, names))
            except TemplateError as exc:
                raise TemplateError(f"result.collect.key: {exc}") from None
        saved.update(collect_into(values, collect, [(key, out)]))
    return out, saved


def branch_task(scope: Scope, branch: BranchPlan, values: dict[str, Any], number: int) -> Task:
    """The task of a branch's tool, rendered against the case's names."""
    engine = scope.engine
    tool = branch.tool
    assert tool is not None
    kind, spec, args = tool.kind, tool.spec, tool.args
    if kind == "workbook":
        try:
            task_def = engine.playbook.task(str(spec.get("name")))
        except KeyError:
            raise TemplateError(f"tool: no workbook task '{spec.get('name')}'") from None
        kind, spec = task_def.tool.kind, task_def.tool.spec
        args = {**task_def.tool.args, **args}
    try:
        rendered_args = engine.renderer.render(args, values, field="args") if args else {}
        rendered_spec = render_spec(engine.renderer, kind, spec, values)
    except TemplateError as exc:
        raise TemplateError(f"tool: {exc}") from None
    sinks = tasks.render_sinks(engine, list(branch.sinks), values, "sink") if branch.sinks else ()
    secrets: set[str] = set()
    if engine.scan.may_reference_secrets(f"{scope.name}.case{branch.index}", kind, spec, args):
        secrets = referenced(rendered_args) | referenced(rendered_spec)
    timeout = tool.timeout_ms or (None if kind == "playbook" else engine.options.tool_timeout_ms)
    return _task(
        scope,
        branch,
        number,
        kind=kind,
        spec=rendered_spec,
        args=rendered_args,
        sinks=sinks,
        secrets=secrets,
        pick=branch.result.pick if sinks and branch.result is not None else None,
        timeout=timeout,
    )


def sink_task(
    scope: Scope, branch: BranchPlan, values: dict[str, Any], out: Any, number: int
) -> Task:
    """Sinks run on a worker, after a tool: a branch without a tool writes the step's output
    (`out`, after the branch's `result.pick`) through a `noop` task that returns it."""
    return _task(
        scope,
        branch,
        number,
        kind="noop",
        spec={},
        args={"out": out},
        sinks=tasks.render_sinks(scope.engine, list(branch.sinks), values, "sink"),
        secrets=set(),
        pick="{{ this.out }}",
        timeout=scope.engine.options.tool_timeout_ms,
    )


def _task(
    scope: Scope,
    branch: BranchPlan,
    number: int,
    *,
    kind: str,
    spec: dict[str, Any],
    args: dict[str, Any],
    sinks: tuple[dict[str, Any], ...],
    secrets: set[str],
    pick: Any,
    timeout: int | None,
) -> Task:
    # With sinks run elsewhere (`EngineOptions.sinks_pool`), a branch's tool hands its
    # sinks off (and their secrets with them); a branch's `noop` write is a sinks-only
    # task and goes there whole.
    where = scope.engine.options.sinks_pool if sinks else None
    whole = where is not None and kind == "noop"
    if where is None or whole:
        for sink in sinks:
            secrets |= referenced(sink["spec"])
    # Its own id and idempotency key (a `retry` branch's tool runs once per round).
    suffix = f"case{branch.index}" if number == 1 else f"case{branch.index}.r{number}"
    if scope.run.run > 1:  # a later run of the step (a cycle of the graph)
        suffix = f"run{scope.run.run}.{suffix}"
    execution_id = scope.state.execution_id
    return Task(
        task_id=f"{execution_id}.{scope.name}.{suffix}",
        execution_id=execution_id,
        step=scope.name,
        kind=kind,
        spec=spec,
        args=args,
        context=scope.turn.ctx(scope.step, scope.run.bind).tool_view(),
        key=f"{execution_id}:{scope.name}:{suffix}",
        attempt=1,
        timeout_ms=timeout,
        secrets=tuple(sorted(secrets)),
        sinks=sinks,
        pick=pick,
        sinks_pool=None if whole else where,
        pool=where if whole else None,
    )
