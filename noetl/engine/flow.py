"""The flow of one decision: `Flow`, the engine's concrete `Turn` (`noetl.engine.turn`).

A `Flow` is made for each `Engine.start` / `Engine.decide`; the input's handler acts on it,
then `settle` makes the calls still pending, re-evaluates parked gates, and ends the
execution once nothing is left to run. In between, this module holds the core of the
flow: calls and `when` gates, dispatch, finishing a step and routing its edges, the
failure policy and the rollback. It hands a step over to the handler modules at their
points: a `loop` (`noetl.engine.loops`), building a task (`noetl.engine.tasks`), a step's
`set` and arc `set` (`noetl.engine.variables`), and a step's `case`
(`noetl.engine.cases`: at dispatch, routing and the end of a loop; only for a step that
has a `case`, so a step without one costs what it always did).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from noetl.core import (
    CancelTasks,
    Command,
    Decision,
    EnqueueTask,
    Event,
    EventType,
    ExecutionStatus,
    StepStatus,
)
from noetl.dsl.model import Condition, Step
from noetl.engine import cases, loops, tasks, variables
from noetl.engine.context import TemplateContext, collect_into
from noetl.engine.state import ExecutionState, apply
from noetl.engine.turn import Collected, Facts
from noetl.errors import TemplateError

__all__ = ["Flow"]


class Flow:
    """One decision in progress (a `Turn`): its facts, state and time, what it made, and
    the calls still to make."""

    __slots__ = ("calls", "commands", "engine", "events", "gate_error", "now", "restart", "state")

    def __init__(self, engine: Facts, state: ExecutionState, now: float) -> None:
        self.engine = engine
        self.state = state
        self.now = now
        self.events: list[Event] = []
        self.commands: list[Command] = []
        self.calls: deque[tuple[str, str]] = deque()
        self.restart: list[str] = []  # steps a reopened execution runs again
        # Why the last `when` gate evaluated counted as false: its render error, if any.
        self.gate_error: str | None = None

    # --- the loop of one decision --------------------------------------------------------

    def settle(self) -> Decision:
        """Make pending calls, re-evaluate parked gates, and finish when quiescent."""
        state = self.state
        while not state.terminal:
            while self.calls and not state.terminal:
                target, by = self.calls.popleft()
                self._call(target, by)
            if state.terminal or state.compensation is not None:
                break
            if not self._wake_parked():
                break
        if not state.terminal and self._quiescent():
            for name in self._parked_in_order():
                self.emit(EventType.STEP_SKIPPED, name, {"reason": "gate false"})
            status = ExecutionStatus.FAIL if state.unhandled_failure else ExecutionStatus.OK
            self.finish_workflow(status, None)
        return Decision(self.events, self.commands)

    def _quiescent(self) -> bool:
        state = self.state
        return not (state.tasks or self.calls or state.running)

    def _parked_in_order(self) -> list[str]:
        return sorted(self.state.parked, key=self.engine.position.__getitem__)

    def _wake_parked(self) -> bool:
        """Re-evaluate parked steps in workflow order; True if one was dispatched or failed."""
        state = self.state
        woke = False
        for name in self._parked_in_order():
            if state.terminal:
                break
            if state.steps[name].status is StepStatus.PARKED:
                if self._join_waits(name):
                    continue
                gate = self._gate(name)
                if gate is True:
                    self.dispatch(name)
                if gate is not False:  # dispatched, or failed by `on_when_error: fail_step`
                    woke = True
        return woke

    # --- calls and gates -----------------------------------------------------------------

    def _call(self, name: str, by: str) -> None:
        run = self.state.steps[name]
        if run.status not in (StepStatus.PENDING, StepStatus.PARKED) and self._on_cycle(by, name):
            self._call_again(name, by)
            return
        ignored = run.status not in (StepStatus.PENDING, StepStatus.PARKED)
        payload: dict[str, Any] = {"by": by}
        if ignored:
            payload["ignored"] = run.status.value
        self.emit(EventType.STEP_CALLED, name, payload)
        if ignored or run.status is StepStatus.PARKED:
            return  # already running or done: at most once; parked: woken by re-evaluation
        self._open(name)

    def _open(self, name: str) -> None:
        """Evaluate a called step's gate: dispatch it, or park it (a join of an upstream
        playbook parks until the steps that can still call it have finished)."""
        waiting = self._join_waits(name)
        if waiting:
            self.emit(EventType.STEP_PARKED, name, {"join": waiting})
            return
        gate = self._gate(name)
        if gate is True:
            self.dispatch(name)
        elif gate is False:
            # A gate that failed to render parks the step too (`on_when_error`); the
            # payload says so, for the `when` metrics and logs.
            parked = {} if self.gate_error is None else {"when_error": self.gate_error}
            self.emit(EventType.STEP_PARKED, name, parked)

    def _join_waits(self, name: str) -> list[str]:
        """Upstream NoETL's implicit join: the running (or just called) steps that can
        still call the join `name`, in workflow order; empty when it may run now."""
        engine = self.engine
        if not engine.playbook.upstream:
            return []
        ancestors = engine.graph.joins.get(name)
        if not ancestors:
            return []
        active = {s for s in self.state.running if s in ancestors}
        active.update(target for target, _ in self.calls if target in ancestors)
        return sorted(active, key=engine.position.__getitem__)

    def _on_cycle(self, by: str, name: str) -> bool:
        graph = self.engine.graph
        return bool(graph.components) and by in graph.nodes and graph.on_cycle(by, name)

    def _call_again(self, name: str, by: str) -> None:
        """A call along a cycle of the graph (`fetch -> check -> fetch`) to a step that has
        run: a new run once the last one has finished (a running step is called again
        when it finishes), up to `policy.max_runs` runs; past that the new run fails."""
        run = self.state.steps[name]
        if run.status is StepStatus.RUNNING:
            if run.recall is None:
                self.emit(EventType.STEP_CALLED, name, {"by": by, "deferred": True})
            else:  # already called again: one more run will follow, not two
                self.emit(EventType.STEP_CALLED, name, {"by": by, "ignored": "running"})
            return
        number = run.run + 1
        self.emit(EventType.STEP_CALLED, name, {"by": by, "run": number})
        limit = self.engine.policy.max_runs
        if number > limit:
            self.emit(EventType.STEP_STARTED, name, {})
            error = (
                f"step '{name}' was called again by '{by}' for run {number}, past "
                f"policy.max_runs ({limit}): the cycle it is on did not end"
            )
            self.finish_step(name, ok=False, error=error)
            return
        self._open(name)

    def _gate(self, name: str) -> bool | None:
        """Evaluate `when`: True to run, False to park, None if the step already failed."""
        engine = self.engine
        step = engine.graph.nodes[name].step
        self.gate_error = None
        if step.when is None:
            return True
        try:
            upstream = engine.playbook.upstream  # an undefined name reads as false there
            context = self.ctx(step).build()
            return engine.renderer.truthy(step.when, context, undefined_false=upstream)
        except TemplateError as exc:
            if engine.policy.on_when_error == "fail_step":
                failed = {"when_error": str(exc)}
                self.emit(EventType.STEP_STARTED, name, failed)
                self.finish_step(name, ok=False, error=f"when: {exc}")
                return None
            self.gate_error = str(exc)
            return False

    # --- dispatch ------------------------------------------------------------------------

    def dispatch(self, name: str) -> None:
        """Start a step whose gate let it through: its `bind`, case, loop or task."""
        engine = self.engine
        step = engine.graph.nodes[name].step
        try:
            bind = engine.renderer.render(step.bind, self.ctx(step).build()) if step.bind else {}
        except TemplateError as exc:
            self.emit(EventType.STEP_STARTED, name, {})
            self.finish_step(name, ok=False, error=f"bind: {exc}")
            return
        if step.case and engine.cases[name].on_entry:
            cases.enter(self, step, bind)
            return
        if step.loop is not None:
            loops.start(self, step, bind)
            return
        if step.tool is None:
            self.emit(EventType.STEP_STARTED, name, {"bind": bind})
            self.finish_step(name, ok=True, this=None)
            return
        try:
            task = tasks.build(self, step, step.tool, bind)
        except TemplateError as exc:
            self.emit(EventType.STEP_STARTED, name, {"bind": bind})
            self.finish_step(name, ok=False, error=f"tool: {exc}")
            return
        self.emit(EventType.STEP_STARTED, name, {"bind": bind, "task": task.to_dict()})
        self.commands.append(EnqueueTask(task))

    # --- finishing and routing -----------------------------------------------------------

    def outputs(
        self, step: Step, this: Any, index: int | None, item: Any
    ) -> tuple[Any, str | None]:
        """`out` (`result.pick` over `this`) and the `collect.key` of a map collect.

        A TemplateError names the key that failed.
        """
        renderer = self.engine.renderer
        ctx = self.ctx(step, self.state.steps[step.step].bind, index=index, item=item)
        out = this
        if step.result is not None and step.result.pick is not None:
            try:
                out = renderer.render(step.result.pick, ctx.build(this=this))
            except TemplateError as exc:
                raise TemplateError(f"result.pick: {exc}") from None
        collect = step.result.collect if step.result else None
        if collect is None or collect.mode != "map":
            return out, None
        try:
            key = renderer.render(collect.key, ctx.build(this=this, out=out))
        except TemplateError as exc:
            raise TemplateError(f"result.collect.key: {exc}") from None
        return out, str(key)

    def finish_step(
        self,
        name: str,
        *,
        ok: bool,
        this: Any = None,
        error: str | None = None,
        result: Any = None,
        collected: Collected | None = None,
        picked: bool = False,
    ) -> None:
        """`step.finished` (its outputs, `set` and collect applied), then its routing."""
        engine = self.engine
        step = engine.graph.nodes[name].step
        payload: dict[str, Any] = {}
        patch: dict[str, Any] = {}
        if ok and not picked:
            try:
                result, collect_key = self.outputs(step, this, None, None)
                collected = [(collect_key, result)]
            except TemplateError as exc:
                ok, error = False, str(exc)
        if ok and step.result is not None and step.result.sink and step.tool is None:
            # Sinks run on the worker after the tool; without a tool nothing would write.
            ok, error = False, "result.sink needs a tool to run after (`tool: noop` will do)"
        if ok and step.set and engine.playbook.upstream:
            # Upstream's step `set`: rendered with the step's result, applied as it ends.
            names = {"result": result, "this": result if picked else this, name: result}
            names["output"] = {"status": "ok", "data": result}
            try:
                patch = variables.render_set(self, step, step.set, names)
            except TemplateError as exc:
                ok, error = False, f"set: {exc}"
        if ok:
            payload["result"] = result
            updates = self._collect(step, collected or [])
            if updates:
                payload["context"] = updates
            if patch:
                payload["ctx"] = patch
            if step.result is not None and step.result.as_:
                payload["saved_as"] = step.result.as_
        elif picked:
            payload["result"] = result
        payload["status"] = "ok" if ok else "failed"
        if error is not None:
            payload["error"] = error
        self.emit(EventType.STEP_FINISHED, name, payload)
        self.route(step, ok)
        self._recall(name)

    def _recall(self, name: str) -> None:
        """A step called along a cycle while it ran is called again now it has finished."""
        recall = self.state.steps[name].recall
        if recall is not None and not self.state.terminal:
            self.calls.append((name, recall))

    def _collect(self, step: Step, collected: Collected) -> dict[str, Any]:
        """The new value of `collect.into`: outputs (with their map keys) in item order."""
        collect = step.result.collect if step.result else None
        if collect is None:
            return {}
        return collect_into(self.state.context, collect, collected)

    def route(self, step: Step, ok: bool) -> None:
        """Follow a finished step's edges (or its case's routes, or the rollback)."""
        state = self.state
        if state.compensation is not None:
            self._compensate_next()  # rolling back: edges are not followed
            return
        if step.case and state.steps[step.step].case is not None:
            cases.route(self, step, ok)  # the case's routes, by its next_policy
            return
        policy = self.engine.policy
        mode = step.next.mode if step.next else "inclusive"
        payload: dict[str, Any] = {"mode": mode}
        set_error = self._evaluate_edges(step, ok, payload)
        taken: list[str] = payload["taken"]
        # An arc whose `set` failed fails the routing of the step, as its failure would.
        unhandled = (not ok and not taken) or set_error is not None
        if unhandled:
            payload["on_step_fail"] = policy.on_step_fail
            if policy.on_step_fail == "halt":
                payload["unhandled_failure"] = True
        if taken or not ok or step.next is not None:
            self.emit(EventType.NEXT_EVALUATED, step.step, payload)
        for target in taken:
            self.calls.append((target, step.step))
        if unhandled:
            self.apply_failure_policy(step.step, set_error)

    def _evaluate_edges(self, step: Step, ok: bool, payload: dict[str, Any]) -> str | None:
        """Which edges fire (`taken`, `edges` and any `ctx` patch into the payload of
        `next.evaluated`); the error of an arc's `set` that failed, if one did.

        Upstream's arc `set` is rendered when its arc fires, with the names its `when`
        saw (every arc reads `ctx` as it was when the step finished), and applied in arc
        order before the target step is called."""
        taken: list[str] = []
        evaluated: list[dict[str, Any]] = []
        ctx = self.ctx(step).build(**self._arc_names(step, ok)) if step.edges else {}
        patch: dict[str, Any] = {}
        set_error: str | None = None
        for edge in step.edges:
            fires, note = self.edge_fires(edge.when, ok, ctx)
            if fires and edge.set and self.engine.playbook.upstream:
                try:
                    patch |= variables.patch_of(self, edge.set, ctx, patch)
                except TemplateError as exc:
                    fires, note = False, {"error": f"set: {exc}"}
                    set_error = f"step '{step.step}', arc to '{edge.step}': set: {exc}"
            evaluated.append({"to": edge.step, "fired": fires, **note})
            if fires:
                taken.append(edge.step)
            if (fires or set_error) and payload["mode"] == "exclusive":
                break
        payload["taken"] = taken
        if evaluated:
            payload["edges"] = evaluated
        if patch:
            payload["ctx"] = patch
        return set_error

    def apply_failure_policy(self, name: str, error: str | None = None) -> None:
        """A failed step no edge handled: halt (and maybe roll back), continue, or route."""
        action = self.engine.policy.on_step_fail
        if action == "halt":
            if not self._start_rollback(name):
                message = error or f"step '{name}' failed"
                self.finish_workflow(ExecutionStatus.FAIL, message)
        elif action.startswith("route_edge:"):
            self.calls.append((action.split(":", 1)[1], name))

    def _start_rollback(self, failed: str) -> bool:
        """Saga: on a halting failure with `policy.rollback: on_fail`, run the compensating
        steps of the steps that succeeded, newest first. False when there is nothing to do."""
        engine, state = self.engine, self.state
        if engine.policy.rollback != "on_fail":
            return False
        queue: list[str] = []
        for name in reversed(state.completed):
            target = engine.graph.nodes[name].step.compensate
            pending = (StepStatus.PENDING, StepStatus.PARKED)
            if target and target not in queue and state.steps[target].status in pending:
                queue.append(target)
        if not queue:
            return False
        in_flight = sorted(state.tasks)
        if in_flight:
            self.emit(EventType.TASK_CANCELED, None, {"task_ids": in_flight})
            self.commands.append(CancelTasks(tuple(in_flight)))
        self.calls.clear()
        payload = {"failed_step": failed, "queue": queue}
        self.emit(EventType.COMPENSATION_STARTED, None, payload)
        self._compensate_next()
        return True

    def _compensate_next(self) -> None:
        """Dispatch the next compensating step (its `when` gate does not apply)."""
        if not self.state.compensation:
            return  # drained: quiescence ends the execution `fail`
        target = self.state.compensation[0]
        self.emit(EventType.STEP_CALLED, target, {"by": "rollback", "compensating": True})
        self.dispatch(target)

    def _arc_names(self, step: Step, ok: bool) -> dict[str, Any]:
        """What an arc's `when` reads in upstream NoETL's dialect: the event the step
        ended with (`call.done`, or `loop.done` once a loop's items are all done; this
        engine evaluates a step's arcs once, when it finishes), its own `result` (for a
        failed step `{status: error, error}`) and `output`, upstream's outcome envelope
        (`{status: ok, data: <result>}`, or `{status: error, error: {message}}`)."""
        if not self.engine.playbook.upstream:
            return {}
        run = self.state.steps[step.step]
        result = run.result if ok else {"status": "error", "error": run.error}
        output = (
            {"status": "ok", "data": run.result}
            if ok
            else {"status": "error", "error": {"message": run.error}}
        )
        event = {"name": "loop.done" if step.loop else "call.done"}
        return {"event": event, "result": result, "this": result, "output": output}

    def edge_fires(
        self, when: Condition | None, ok: bool, ctx: dict[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        """An edge without `when` fires only on success; with `when`, when it is true."""
        if when is None:
            return ok, {}
        engine = self.engine
        try:
            upstream = engine.playbook.upstream  # an undefined name reads as false there
            return engine.renderer.truthy(when, ctx, undefined_false=upstream), {}
        except TemplateError as exc:
            return False, {"error": str(exc)}

    def finish_workflow(self, status: ExecutionStatus, error: str | None) -> None:
        """End the execution: tasks in flight canceled, `workflow.finished`."""
        in_flight = sorted(self.state.tasks)
        if in_flight:
            self.emit(EventType.TASK_CANCELED, None, {"task_ids": in_flight})
            self.commands.append(CancelTasks(tuple(in_flight)))
        payload: dict[str, Any] = {"status": status.value}
        if error:
            payload["error"] = error
        self.emit(EventType.WORKFLOW_FINISHED, None, payload)
        self.calls.clear()

    def after_loop(self, step: Step, outcome: dict[str, Any]) -> bool:
        """A loop step with a `case` drained its items: True when its case decides how the
        step ends, False to let the loop finish as usual."""
        return cases.after_loop(self, step, outcome)

    # --- helpers -------------------------------------------------------------------------

    def ctx(
        self,
        step: Step,
        bind: dict[str, Any] | None = None,
        *,
        index: int | None = None,
        item: Any = None,
        key: Any = None,
    ) -> TemplateContext:
        """The names the step's templates see (of one loop item when `index` is given)."""
        state = self.state
        if key is None and index is not None:
            key = state.steps[step.step].keys.get(index)
        upstream = self.engine.playbook.upstream
        ctx = TemplateContext(state, step, bind or {}, index, item, key=key, upstream=upstream)
        ctx.resolve = self.engine.options.resolve  # spilled results, field by field
        return ctx

    def emit(self, event_type: EventType, step: str | None, payload: dict[str, Any]) -> Event:
        """Append an event to the decision and advance the state by it."""
        state = self.state
        event = Event(
            seq=state.seq + 1,
            type=event_type.value,
            execution_id=state.execution_id,
            ts=self.now,
            step=step,
            payload=payload,
        )
        apply(state, event)
        self.events.append(event)
        return event
