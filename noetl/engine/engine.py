"""The engine: a pure, deterministic state machine over an execution's event log.

`Engine.start` and `Engine.decide` take the state, an input and `now`, and return a
`Decision`: the events to append (in order; the state has already been advanced by them)
and the commands for the runtime (enqueue a task, requeue one, cancel tasks). No I/O, no
clock, no randomness: the same inputs always give the same events. Mistakes in a playbook
found at run time (a bad template, a missing key) become failed steps, never exceptions.

This module holds the core flow of a decision: calls and `when` gates, dispatch, finishing
a step and routing its edges, the failure policy and the rollback. The rest is in modules
of functions over the `Engine` (each takes it as its first argument):

* `noetl.engine.outcomes`: a task's outcome, its retry verdict (`noetl.engine.retry`),
  retries, lost leases and dead letters;
* `noetl.engine.loops`: a loop step's collection, window, items and end;
* `noetl.engine.tasks`: building a step's task (tool, sinks, secrets, timeout);
* `noetl.engine.recovery`: operators' replays and force-completes, a loop's total budget.

A step's `case` (seed 004) is decided in `noetl.engine.cases`; the engine hands a step over
at four points (dispatch, a task outcome, the end of a loop, routing), and only for a step
that has a `case`: a step without one costs what it always did.
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
from noetl.dsl.graph import Graph
from noetl.dsl.model import Condition, Step
from noetl.dsl.render import Renderer
from noetl.engine import cases, loops, outcomes, recovery, tasks, variables
from noetl.engine.case_plan import CasePlan
from noetl.engine.context import TemplateContext, collect_into
from noetl.engine.options import EngineOptions, effective_policy
from noetl.engine.retry import RetryDefaults, RetryRule, rule_for
from noetl.engine.state import ExecutionState, apply
from noetl.errors import TemplateError


class _Turn:
    """The events and commands of one decision, and the calls still to make."""

    __slots__ = ("calls", "commands", "events", "gate_error", "now", "restart")

    def __init__(self, now: float) -> None:
        self.now = now
        self.events: list[Event] = []
        self.commands: list[Command] = []
        self.calls: deque[tuple[str, str]] = deque()
        self.restart: list[str] = []  # steps a reopened execution runs again
        # Why the last `when` gate evaluated counted as false: its render error, if any.
        self.gate_error: str | None = None


class Engine:
    """Decides what happens next in executions of one playbook graph."""

    def __init__(
        self,
        graph: Graph,
        renderer: Renderer | None = None,
        *,
        max_lease_expiries: int = 3,
        retry_defaults: RetryDefaults | None = None,
        options: EngineOptions | None = None,
    ) -> None:
        self.max_lease_expiries = max_lease_expiries
        self.graph = graph
        self.playbook = graph.playbook
        self.renderer = renderer or Renderer()
        self.order = graph.order
        self.position = {name: index for index, name in enumerate(self.order)}
        # Defaults for what the playbook leaves unsaid (from the configuration).
        self.options = options or EngineOptions()
        # The policy of a step without `retry` (`retry_defaults` overrides the options').
        self.retry_defaults = retry_defaults or self.options.retry
        # The playbook's `policy` with the keys it leaves unset filled in.
        self.policy = effective_policy(self.playbook, self.options)
        # Record tasks that fail for good as `task.dead_lettered` (the DLQ); off, they
        # only fail their step.
        self.dead_letters = self.options.dead_letters
        # For building tasks (noetl.engine.tasks): a sink's default retry, and whether a
        # step's tool templates mention `secrets` (filled in as steps are dispatched).
        self._sink_retry = self.options.sink_retry_json()
        self._secret_steps: dict[str, bool] = {}
        # And whether they mention upstream's `ctx` / `iter`, which their tasks then carry.
        self._variable_steps: dict[str, bool] = {}
        self.retry_rules: dict[str, RetryRule] = {
            step.step: rule_for(step, self.playbook, self.retry_defaults)
            for step in self.playbook.workflow
            if step.tool is not None
        }
        # The `case` of each step that has one, resolved once (noetl.engine.cases).
        self.cases: dict[str, CasePlan] = {
            step.step: CasePlan.of(step, self.playbook, self.retry_defaults)
            for step in self.playbook.workflow
            if step.case
        }

    # --- inputs --------------------------------------------------------------------------

    def new_state(self, execution_id: str) -> ExecutionState:
        return ExecutionState.new(execution_id, self.order)

    def start(self, state: ExecutionState, workload: dict[str, Any], now: float) -> Decision:
        """Begin an execution: record the workload and call the entry step."""
        turn = _Turn(now)
        self._emit(state, turn, EventType.WORKFLOW_STARTED, None, {"workload": workload})
        turn.calls.append((self.graph.entry, "execution"))
        return self._settle(state, turn)

    def decide(self, state: ExecutionState, event: Event, now: float) -> Decision:
        """React to an input event: a task outcome, an expired lease, a cancel request, a
        timer, or an operator's replay (which may reopen a finished execution) or
        force-complete (see `noetl.engine.recovery`)."""
        turn = _Turn(now)
        if event.type == EventType.TASK_REPLAYED:
            recovery.on_replay(self, state, turn, event)
            return self._settle(state, turn)
        if state.terminal:
            return Decision([], [])  # late input after the end: discarded
        if event.type == EventType.TOOL_PROCESSED:
            outcomes.on_outcome(self, state, turn, event)
        elif event.type == EventType.LEASE_EXPIRED:
            outcomes.on_lease_expired(self, state, turn, event)
        elif event.type == EventType.CANCEL_REQUESTED:
            self._emit(state, turn, EventType.CANCEL_REQUESTED, None, dict(event.payload))
            self._finish_workflow(state, turn, ExecutionStatus.CANCELED, "canceled")
            return Decision(turn.events, turn.commands)
        elif event.type == EventType.STEP_FORCE_COMPLETED:
            recovery.on_force_complete(self, state, turn, event)
        elif event.type == EventType.TIMER_FIRED:
            recovery.on_timer(self, state, turn, event)
        else:
            raise ValueError(f"the engine does not take {event.type!r} as an input")
        return self._settle(state, turn)

    # --- the loop of one decision --------------------------------------------------------

    def _settle(self, state: ExecutionState, turn: _Turn) -> Decision:
        """Make pending calls, re-evaluate parked gates, and finish when quiescent."""
        while not state.terminal:
            while turn.calls and not state.terminal:
                target, by = turn.calls.popleft()
                self._call(state, turn, target, by)
            if state.terminal or state.compensation is not None:
                break
            if not self._wake_parked(state, turn):
                break
        if not state.terminal and self._quiescent(state, turn):
            for name in self._parked_in_order(state):
                self._emit(state, turn, EventType.STEP_SKIPPED, name, {"reason": "gate false"})
            status = ExecutionStatus.FAIL if state.unhandled_failure else ExecutionStatus.OK
            self._finish_workflow(state, turn, status, None)
        return Decision(turn.events, turn.commands)

    def _quiescent(self, state: ExecutionState, turn: _Turn) -> bool:
        return not (state.tasks or turn.calls or state.running)

    def _parked_in_order(self, state: ExecutionState) -> list[str]:
        return sorted(state.parked, key=self.position.__getitem__)

    def _wake_parked(self, state: ExecutionState, turn: _Turn) -> bool:
        """Re-evaluate parked steps in workflow order; True if one was dispatched or failed."""
        woke = False
        for name in self._parked_in_order(state):
            if state.terminal:
                break
            if state.steps[name].status is StepStatus.PARKED:
                gate = self._gate(state, turn, name)
                if gate is True:
                    self._dispatch(state, turn, name)
                if gate is not False:  # dispatched, or failed by `on_when_error: fail_step`
                    woke = True
        return woke

    # --- calls and gates -----------------------------------------------------------------

    def _call(self, state: ExecutionState, turn: _Turn, name: str, by: str) -> None:
        run = state.steps[name]
        ignored = run.status not in (StepStatus.PENDING, StepStatus.PARKED)
        payload: dict[str, Any] = {"by": by}
        if ignored:
            payload["ignored"] = run.status.value
        self._emit(state, turn, EventType.STEP_CALLED, name, payload)
        if ignored or run.status is StepStatus.PARKED:
            return  # already running or done: at most once; parked: woken by re-evaluation
        gate = self._gate(state, turn, name)
        if gate is True:
            self._dispatch(state, turn, name)
        elif gate is False:
            # A gate that failed to render parks the step too (`on_when_error`); the
            # payload says so, for the `when` metrics and logs.
            parked = {} if turn.gate_error is None else {"when_error": turn.gate_error}
            self._emit(state, turn, EventType.STEP_PARKED, name, parked)

    def _gate(self, state: ExecutionState, turn: _Turn, name: str) -> bool | None:
        """Evaluate `when`: True to run, False to park, None if the step already failed."""
        step = self.graph.nodes[name].step
        turn.gate_error = None
        if step.when is None:
            return True
        try:
            return self.renderer.truthy(step.when, self._ctx(state, step).build())
        except TemplateError as exc:
            if self.policy.on_when_error == "fail_step":
                failed = {"when_error": str(exc)}
                self._emit(state, turn, EventType.STEP_STARTED, name, failed)
                self._finish_step(state, turn, name, ok=False, error=f"when: {exc}")
                return None
            turn.gate_error = str(exc)
            return False

    # --- dispatch ------------------------------------------------------------------------

    def _dispatch(self, state: ExecutionState, turn: _Turn, name: str) -> None:
        step = self.graph.nodes[name].step
        try:
            bind = (
                self.renderer.render(step.bind, self._ctx(state, step).build()) if step.bind else {}
            )
        except TemplateError as exc:
            self._emit(state, turn, EventType.STEP_STARTED, name, {})
            self._finish_step(state, turn, name, ok=False, error=f"bind: {exc}")
            return
        if step.case and self.cases[name].on_entry:
            cases.enter(self, state, turn, step, bind)
            return
        if step.loop is not None:
            loops.start(self, state, turn, step, bind)
            return
        if step.tool is None:
            self._emit(state, turn, EventType.STEP_STARTED, name, {"bind": bind})
            self._finish_step(state, turn, name, ok=True, this=None)
            return
        try:
            task = tasks.build(self, state, step, step.tool, bind)
        except TemplateError as exc:
            self._emit(state, turn, EventType.STEP_STARTED, name, {"bind": bind})
            self._finish_step(state, turn, name, ok=False, error=f"tool: {exc}")
            return
        self._emit(
            state, turn, EventType.STEP_STARTED, name, {"bind": bind, "task": task.to_dict()}
        )
        turn.commands.append(EnqueueTask(task))

    # --- finishing and routing -----------------------------------------------------------

    def _outputs(
        self, state: ExecutionState, step: Step, this: Any, index: int | None, item: Any
    ) -> tuple[Any, str | None]:
        """`out` (`result.pick` over `this`) and the `collect.key` of a map collect.

        A TemplateError names the key that failed.
        """
        ctx = self._ctx(state, step, state.steps[step.step].bind, index=index, item=item)
        out = this
        if step.result is not None and step.result.pick is not None:
            try:
                out = self.renderer.render(step.result.pick, ctx.build(this=this))
            except TemplateError as exc:
                raise TemplateError(f"result.pick: {exc}") from None
        collect = step.result.collect if step.result else None
        if collect is None or collect.mode != "map":
            return out, None
        try:
            key = self.renderer.render(collect.key, ctx.build(this=this, out=out))
        except TemplateError as exc:
            raise TemplateError(f"result.collect.key: {exc}") from None
        return out, str(key)

    def _finish_step(
        self,
        state: ExecutionState,
        turn: _Turn,
        name: str,
        *,
        ok: bool,
        this: Any = None,
        error: str | None = None,
        result: Any = None,
        collected: list[tuple[str | None, Any]] | None = None,
        picked: bool = False,
    ) -> None:
        step = self.graph.nodes[name].step
        payload: dict[str, Any] = {}
        patch: dict[str, Any] = {}
        if ok and not picked:
            try:
                result, collect_key = self._outputs(state, step, this, None, None)
                collected = [(collect_key, result)]
            except TemplateError as exc:
                ok, error = False, str(exc)
        if ok and step.result is not None and step.result.sink and step.tool is None:
            # Sinks run on the worker after the tool; without a tool nothing would write.
            ok, error = False, "result.sink needs a tool to run after (`tool: noop` will do)"
        if ok and step.set and self.playbook.upstream:
            # Upstream's step `set`: rendered with the step's result, applied as it ends.
            names = {"result": result, "this": result if picked else this, name: result}
            names["output"] = {"status": "ok", "data": result}
            try:
                patch = variables.render_set(self, state, step, step.set, names)
            except TemplateError as exc:
                ok, error = False, f"set: {exc}"
        if ok:
            payload["result"] = result
            updates = self._collect(state, step, collected or [])
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
        self._emit(state, turn, EventType.STEP_FINISHED, name, payload)
        self._route(state, turn, step, ok)

    def _collect(
        self, state: ExecutionState, step: Step, collected: list[tuple[str | None, Any]]
    ) -> dict[str, Any]:
        """The new value of `collect.into`: outputs (with their map keys) in item order."""
        collect = step.result.collect if step.result else None
        if collect is None:
            return {}
        return collect_into(state.context, collect, collected)

    def _route(self, state: ExecutionState, turn: _Turn, step: Step, ok: bool) -> None:
        if state.compensation is not None:
            self._compensate_next(state, turn)  # rolling back: edges are not followed
            return
        if step.case and state.steps[step.step].case is not None:
            cases.route(self, state, turn, step, ok)  # the case's routes, by its next_policy
            return
        mode = step.next.mode if step.next else "inclusive"
        payload: dict[str, Any] = {"mode": mode}
        set_error = self._evaluate_edges(state, step, ok, payload)
        taken: list[str] = payload["taken"]
        # An arc whose `set` failed fails the routing of the step, as its failure would.
        unhandled = (not ok and not taken) or set_error is not None
        if unhandled:
            payload["on_step_fail"] = self.policy.on_step_fail
            if self.policy.on_step_fail == "halt":
                payload["unhandled_failure"] = True
        if taken or not ok or step.next is not None:
            self._emit(state, turn, EventType.NEXT_EVALUATED, step.step, payload)
        for target in taken:
            turn.calls.append((target, step.step))
        if unhandled:
            self._apply_failure_policy(state, turn, step.step, set_error)

    def _evaluate_edges(
        self, state: ExecutionState, step: Step, ok: bool, payload: dict[str, Any]
    ) -> str | None:
        """Which edges fire (`taken`, `edges` and any `ctx` patch into the payload of
        `next.evaluated`); the error of an arc's `set` that failed, if one did.

        Upstream's arc `set` is rendered when its arc fires, with the names its `when`
        saw (every arc reads `ctx` as it was when the step finished), and applied in arc
        order before the target step is called."""
        taken: list[str] = []
        evaluated: list[dict[str, Any]] = []
        ctx = self._ctx(state, step).build(**self._arc_names(state, step, ok)) if step.edges else {}
        patch: dict[str, Any] = {}
        set_error: str | None = None
        for edge in step.edges:
            fires, note = self._edge_fires(edge.when, ok, ctx)
            if fires and edge.set and self.playbook.upstream:
                try:
                    patch |= variables.patch_of(self, state, edge.set, ctx, patch)
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

    def _apply_failure_policy(
        self, state: ExecutionState, turn: _Turn, name: str, error: str | None = None
    ) -> None:
        """A failed step no edge handled: halt (and maybe roll back), continue, or route."""
        action = self.policy.on_step_fail
        if action == "halt":
            if not self._start_rollback(state, turn, name):
                message = error or f"step '{name}' failed"
                self._finish_workflow(state, turn, ExecutionStatus.FAIL, message)
        elif action.startswith("route_edge:"):
            turn.calls.append((action.split(":", 1)[1], name))

    def _start_rollback(self, state: ExecutionState, turn: _Turn, failed: str) -> bool:
        """Saga: on a halting failure with `policy.rollback: on_fail`, run the compensating
        steps of the steps that succeeded, newest first. False when there is nothing to do."""
        if self.policy.rollback != "on_fail":
            return False
        queue: list[str] = []
        for name in reversed(state.completed):
            target = self.graph.nodes[name].step.compensate
            pending = (StepStatus.PENDING, StepStatus.PARKED)
            if target and target not in queue and state.steps[target].status in pending:
                queue.append(target)
        if not queue:
            return False
        in_flight = sorted(state.tasks)
        if in_flight:
            self._emit(state, turn, EventType.TASK_CANCELED, None, {"task_ids": in_flight})
            turn.commands.append(CancelTasks(tuple(in_flight)))
        turn.calls.clear()
        payload = {"failed_step": failed, "queue": queue}
        self._emit(state, turn, EventType.COMPENSATION_STARTED, None, payload)
        self._compensate_next(state, turn)
        return True

    def _compensate_next(self, state: ExecutionState, turn: _Turn) -> None:
        """Dispatch the next compensating step (its `when` gate does not apply)."""
        if not state.compensation:
            return  # drained: quiescence ends the execution `fail`
        target = state.compensation[0]
        self._emit(
            state, turn, EventType.STEP_CALLED, target, {"by": "rollback", "compensating": True}
        )
        self._dispatch(state, turn, target)

    def _arc_names(self, state: ExecutionState, step: Step, ok: bool) -> dict[str, Any]:
        """What an arc's `when` reads in upstream NoETL's dialect: the event the step
        ended with (`call.done`, or `loop.done` once a loop's items are all done; this
        engine evaluates a step's arcs once, when it finishes), its own `result` (for a
        failed step `{status: error, error}`) and `output`, upstream's outcome envelope
        (`{status: ok, data: <result>}`, or `{status: error, error: {message}}`)."""
        if not self.playbook.upstream:
            return {}
        run = state.steps[step.step]
        result = run.result if ok else {"status": "error", "error": run.error}
        output = (
            {"status": "ok", "data": run.result}
            if ok
            else {"status": "error", "error": {"message": run.error}}
        )
        event = {"name": "loop.done" if step.loop else "call.done"}
        return {"event": event, "result": result, "this": result, "output": output}

    def _edge_fires(
        self, when: Condition | None, ok: bool, ctx: dict[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        """An edge without `when` fires only on success; with `when`, when it is true."""
        if when is None:
            return ok, {}
        try:
            return self.renderer.truthy(when, ctx), {}
        except TemplateError as exc:
            return False, {"error": str(exc)}

    def _finish_workflow(
        self, state: ExecutionState, turn: _Turn, status: ExecutionStatus, error: str | None
    ) -> None:
        in_flight = sorted(state.tasks)
        if in_flight:
            self._emit(state, turn, EventType.TASK_CANCELED, None, {"task_ids": in_flight})
            turn.commands.append(CancelTasks(tuple(in_flight)))
        payload: dict[str, Any] = {"status": status.value}
        if error:
            payload["error"] = error
        self._emit(state, turn, EventType.WORKFLOW_FINISHED, None, payload)
        turn.calls.clear()

    # --- helpers -------------------------------------------------------------------------

    def _ctx(
        self,
        state: ExecutionState,
        step: Step,
        bind: dict[str, Any] | None = None,
        *,
        index: int | None = None,
        item: Any = None,
        key: Any = None,
    ) -> TemplateContext:
        if key is None and index is not None:
            key = state.steps[step.step].keys.get(index)
        upstream = self.playbook.upstream
        return TemplateContext(state, step, bind or {}, index, item, key=key, upstream=upstream)

    def _emit(
        self,
        state: ExecutionState,
        turn: _Turn,
        event_type: EventType,
        step: str | None,
        payload: dict[str, Any],
    ) -> Event:
        event = Event(
            seq=state.seq + 1,
            type=event_type.value,
            execution_id=state.execution_id,
            ts=turn.now,
            step=step,
            payload=payload,
        )
        apply(state, event)
        turn.events.append(event)
        return event
