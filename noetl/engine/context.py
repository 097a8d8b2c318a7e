"""The names a template sees, and the helpers `done ok fail running loop_done all_done any_done`.

In scope: `workload`, `execution_id`, values saved with `result.as` / `collect`, the step's
`bind` values, the loop element and `_loop` {index, item}, the read-only `step` namespace,
the helpers, and (in result templates) `this` and `out`. `_loop.key` is the item's rendered
`loop.key`, or its index when the loop has no `key`. A playbook in upstream NoETL's dialect
also sees its execution variables `ctx`, `job` (the execution's id) and, in a loop
iteration, `iter`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from noetl.core import StepStatus
from noetl.core.secrets import SECRETS
from noetl.dsl.envelope import LoopResult, StepResult
from noetl.dsl.model import Collect, Step
from noetl.dsl.spilled import Resolve, is_spilled, lazy
from noetl.engine.state import ExecutionState, StepNamespace, StepRun


def helpers(state: ExecutionState) -> dict[str, Callable[..., bool]]:
    """The status helpers, bound to one execution's state."""
    steps = state.steps

    def _status(name: str) -> StepStatus:
        run = steps.get(name)
        if run is None:
            raise KeyError(f"no step named '{name}'")
        return run.status

    def done(name: str) -> bool:
        return _status(name).done

    def ok(name: str) -> bool:
        return _status(name) is StepStatus.OK

    def fail(name: str) -> bool:
        return _status(name) is StepStatus.FAILED

    def running(name: str) -> bool:
        return _status(name) is StepStatus.RUNNING

    def loop_done(name: str) -> bool:
        # A loop is drained when its step is done; a step without a loop counts as drained
        # when it is done too, so the helper is safe to use on either.
        return done(name)

    def all_done(names: Iterable[str]) -> bool:
        return all(done(n) for n in names)

    def any_done(names: Iterable[str]) -> bool:
        return any(done(n) for n in names)

    return {
        "done": done,
        "ok": ok,
        "fail": fail,
        "running": running,
        "loop_done": loop_done,
        "all_done": all_done,
        "any_done": any_done,
    }


class TemplateContext:
    """Builds the mapping a template is rendered against, for one step (and loop item)."""

    __slots__ = ("bind", "index", "item", "key", "resolve", "state", "step", "upstream")

    def __init__(
        self,
        state: ExecutionState,
        step: Step,
        bind: dict[str, Any],
        index: int | None = None,
        item: Any = None,
        *,
        key: Any = None,
        upstream: bool = False,
        resolve: Resolve | None = None,
    ) -> None:
        self.resolve = resolve  # reads a spilled result's fields (noetl.dsl.spilled)
        self.state = state
        self.step = step
        self.bind = bind
        self.index = index
        self.item = item
        self.key = key
        self.upstream = upstream

    def _upstream_names(self, *, workload: bool = True, tool: bool = False) -> dict[str, Any]:
        """Upstream NoETL's names: each workload key bare (`{{ message }}` is
        `workload.message`), `result` (the result of the step that finished last: the
        step that called this one, in a chain), then each finished step's result under
        the step's name (`{{ fetch.rows }}`), then the saved values; later ones win."""
        state = self.state
        resolve = None if tool else self.resolve  # a task carries plain data
        names: dict[str, Any] = dict(state.workload) if workload else {}
        if state.completed:
            names["result"] = lazy(state.steps[state.completed[-1]].result, resolve)
        for name, run in state.steps.items():
            # a step running again (a cycle) shows its last finished run's result
            if run.status is StepStatus.OK or (run.run > 1 and run.result is not None):
                if run.is_loop:
                    names[name] = LoopResult.of(run.result, loop_stats(run))
                elif resolve is not None and is_spilled(run.result):
                    names[name] = lazy(run.result, resolve)
                else:
                    names[name] = StepResult.of(run.result)
        names.update(self._saved(resolve))
        return names

    def _saved(self, resolve: Resolve | None) -> dict[str, Any]:
        """The saved values (`result.as`, `collect`), a spilled one readable field by field."""
        saved = self.state.context
        if resolve is None:
            return dict(saved)
        return {name: lazy(value, resolve) for name, value in saved.items()}

    def _loop_names(self) -> dict[str, Any]:
        if self.index is None or self.step.loop is None:
            return {}
        key = self.index if self.key is None else self.key
        names = {
            self.step.loop.element: self.item,
            "_loop": {"index": self.index, "item": self.item, "key": key},
        }
        if self.upstream:
            names["loop_index"] = self.index  # upstream's name of the item's index
        return names

    def _variables(self) -> dict[str, Any]:
        """Upstream NoETL's `ctx` (the execution's variables, a copy: templates read it,
        `set:` writes it through events), `iter` (the loop iteration's: its element
        under the loop's `iterator` name, and `_index`; empty outside an iteration) and
        `job` (the execution: `job.execution_id`, `job.uuid`, both its id)."""
        loop = self.step.loop
        iteration: dict[str, Any] = {}
        if self.index is not None and loop is not None:
            iteration = {loop.element: self.item, "_index": self.index}
        job = {"execution_id": self.state.execution_id, "uuid": self.state.execution_id}
        return {"ctx": dict(self.state.ctx), "iter": iteration, "job": job}

    def build(self, **extra: Any) -> dict[str, Any]:
        state = self.state
        ctx: dict[str, Any] = self._upstream_names() if self.upstream else self._saved(self.resolve)
        ctx.update(helpers(state))
        ctx["workload"] = state.workload
        ctx["execution_id"] = state.execution_id
        ctx["step"] = StepNamespace(state.steps)
        ctx["secrets"] = SECRETS  # references only: see noetl.core.secrets
        if self.upstream:
            ctx.update(self._variables())
        ctx.update(self.bind)
        ctx.update(self._loop_names())
        ctx.update(extra)
        if self.resolve is not None and "this" in extra:
            ctx["this"] = lazy(extra["this"], self.resolve)
        return ctx

    def tool_view(self, *, full: bool = False, variables: bool = False) -> dict[str, Any]:
        """The `context` a task carries: ids, bind values and the loop item.

        Saved results are passed to tools through `args` templates, so a task's size does
        not grow with the execution's history; `full` (the python code of an upstream
        NoETL playbook, which reads `context.get('<step>')`) adds upstream's names too,
        but for the workload's keys. The workload is not copied into each task (a loop of
        a thousand items would store it a thousand times, in its events and its queue
        rows): the runtime that runs the task adds it to the context the tool sees, from
        the execution's `workflow.started` (`noetl.decision.workloads`), and the python
        tool's top-level style spreads its keys as upstream does. `variables` (a task
        whose tool reads them on the worker, noetl.engine.tasks) adds upstream's `ctx`,
        and `iter` for a loop item: copied into a task only where it is read, for the
        same reason.
        """
        view: dict[str, Any] = self._upstream_names(workload=False, tool=True) if full else {}
        view |= {
            "execution_id": self.state.execution_id,
            "step": self.step.step,
        }
        if self.upstream and variables:
            values = self._variables()
            view["ctx"] = values["ctx"]
            if self.index is not None:
                view["iter"] = values["iter"]
        view.update(self.bind)
        view.update(self._loop_names())
        return view


def collect_into(
    context: Mapping[str, Any], collect: Collect, collected: list[tuple[str | None, Any]]
) -> dict[str, Any]:
    """The new value of `collect.into`: outputs (with their map keys) in item order."""
    current = context.get(collect.into)
    if collect.mode == "list":
        base = list(current) if isinstance(current, list) else []
        return {collect.into: base + [out for _, out in collected]}
    mapping = dict(current) if isinstance(current, dict) else {}
    for key, out in collected:
        mapping[str(key)] = out
    return {collect.into: mapping}


def loop_stats(run: StepRun) -> dict[str, Any]:
    """A loop step's counters as upstream's `.stats` names them."""
    return {
        "total": run.total,
        "completed": run.completed,
        "succeeded": run.succeeded,
        "failed": run.failed,
    }
