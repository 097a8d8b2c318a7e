"""The engine: a pure, deterministic state machine over an execution's event log.

`Engine.start` and `Engine.decide` take the state, an input and `now`, and return a
`Decision`: the events to append (in order; the state has already been advanced by them)
and the commands for the runtime (enqueue a task, requeue one, cancel tasks). No I/O, no
clock, no randomness: the same inputs always give the same events. Mistakes in a playbook
found at run time (a bad template, a missing key) become failed steps, never exceptions.

Retries (`noetl.engine.retry`): each task outcome is assessed with its step's retry policy;
a retry is `retry.started` plus a `RequeueTask` of the same task id with the next attempt
and a delay; attempts that run out give `retry.processed` (status `exhausted`), and the
task fails as any failed task does.

A step's `case` (seed 004) is decided in `noetl.engine.cases`; the engine hands a step over
at four points (dispatch, a task outcome, the end of a loop, routing), and only for a step
that has a `case`: a step without one costs what it always did.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from typing import Any

from noetl.dsl.graph import Graph
from noetl.dsl.model import Condition, Loop, Sink, Step, Tool
from noetl.engine import cases, recovery
from noetl.engine.case_plan import CasePlan
from noetl.engine.context import TemplateContext, collect_into
from noetl.engine.options import EngineOptions, effective_policy
from noetl.engine.render import Renderer, render_spec
from noetl.engine.retry import (
    FINISH,
    Attempt,
    RetryAction,
    RetryDefaults,
    RetryRule,
    Verdict,
    assess,
    jitter_key,
    rule_for,
)
from noetl.engine.secrets import referenced
from noetl.engine.state import ExecutionState, StepRun, apply
from noetl.engine.types import (
    CancelTasks,
    Command,
    Decision,
    EnqueueTask,
    Event,
    EventType,
    ExecutionStatus,
    RequeueTask,
    StepStatus,
    Task,
)
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
        self._sink_retry = self.options.sink_retry_json()
        self._secret_steps: dict[str, bool] = {}
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
            self._on_outcome(state, turn, event)
        elif event.type == EventType.LEASE_EXPIRED:
            self._on_lease_expired(state, turn, event)
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
            self._start_loop(state, turn, step, step.loop, bind)
            return
        if step.tool is None:
            self._emit(state, turn, EventType.STEP_STARTED, name, {"bind": bind})
            self._finish_step(state, turn, name, ok=True, this=None)
            return
        try:
            task = self._task(state, step, step.tool, bind)
        except TemplateError as exc:
            self._emit(state, turn, EventType.STEP_STARTED, name, {"bind": bind})
            self._finish_step(state, turn, name, ok=False, error=f"tool: {exc}")
            return
        self._emit(
            state, turn, EventType.STEP_STARTED, name, {"bind": bind, "task": task.to_dict()}
        )
        turn.commands.append(EnqueueTask(task))

    def _start_loop(
        self, state: ExecutionState, turn: _Turn, step: Step, loop: Loop, bind: dict[str, Any]
    ) -> None:
        self._emit(state, turn, EventType.STEP_STARTED, step.step, {"bind": bind})
        self._begin_loop(state, turn, step, loop, bind)

    def _begin_loop(
        self, state: ExecutionState, turn: _Turn, step: Step, loop: Loop, bind: dict[str, Any]
    ) -> None:
        """Render the collection of a started loop step and dispatch its first items."""
        name = step.step
        try:
            items = self.renderer.render(loop.collection, self._ctx(state, step, bind).build())
        except TemplateError as exc:
            self._finish_step(state, turn, name, ok=False, error=f"loop.collection: {exc}")
            return
        if isinstance(items, dict):
            items = [{"key": k, "value": v} for k, v in items.items()]
        if not isinstance(items, list | tuple):
            got = type(items).__name__
            self._finish_step(
                state, turn, name, ok=False, error=f"loop.collection must be a list, got {got}"
            )
            return
        self._emit(
            state, turn, EventType.LOOP_STARTED, name, {"items": list(items), "mode": loop.mode}
        )
        budget = loop.total_timeout_ms or self.options.loop_total_timeout_ms
        if budget and items:
            loop_seq = state.steps[name].loop_seq
            turn.commands.append(recovery.loop_timer(name, loop_seq, budget))
        self._advance_loop(state, turn, step)

    def _advance_loop(self, state: ExecutionState, turn: _Turn, step: Step) -> None:
        """Dispatch items while the window has room; finish the loop when it has drained."""
        run = state.steps[step.step]
        loop = step.loop
        assert loop is not None
        window = 1 if loop.mode == "sequential" else (loop.max_concurrency or len(run.items))
        while (
            run.status is StepStatus.RUNNING
            and not run.stopped
            and run.next_index < len(run.items)
            and run.in_flight < window
        ):
            self._start_item(state, turn, step, run.next_index)
        drained = run.stopped or run.next_index >= len(run.items)
        if run.status is StepStatus.RUNNING and run.in_flight == 0 and drained:
            self._finish_loop(state, turn, step)

    def _start_item(self, state: ExecutionState, turn: _Turn, step: Step, index: int) -> None:
        """Start one loop item: its task, or its output at once (no tool, or an error)."""
        run = state.steps[step.step]
        item = run.items[index]
        started: dict[str, Any] = {"index": index}
        error = None
        task = None
        try:
            key = self._loop_key(state, step, run.bind, index, item)
        except TemplateError as exc:
            key, error = None, f"loop.key: {exc}"
        if key is not None:
            started["key"] = key
        if error is None and step.tool is not None:
            try:
                task = self._task(state, step, step.tool, run.bind, index=index, item=item, key=key)
            except TemplateError as exc:
                error = f"tool: {exc}"
        if task is not None:
            started["task"] = task.to_dict()
        self._emit(state, turn, EventType.LOOP_ITERATION_STARTED, step.step, started)
        if task is not None:
            turn.commands.append(EnqueueTask(task))
        elif error is not None:
            self._record_item(state, turn, step, index, ok=False, this=None, error=error)
        else:  # a loop without a tool: each output is the item itself
            self._record_item(state, turn, step, index, ok=True, this=item, error=None)

    def _loop_key(
        self, state: ExecutionState, step: Step, bind: dict[str, Any], index: int, item: Any
    ) -> Any:
        """The item's rendered `loop.key` (None without one)."""
        if step.loop is None or step.loop.key is None:
            return None
        ctx = self._ctx(state, step, bind, index=index, item=item)
        return self.renderer.render(step.loop.key, ctx.build())

    def _task(
        self,
        state: ExecutionState,
        step: Step,
        tool: Tool,
        bind: dict[str, Any],
        *,
        index: int | None = None,
        item: Any = None,
        key: Any = None,
    ) -> Task:
        ctx = self._ctx(state, step, bind, index=index, item=item, key=key)
        kind, spec, args = tool.kind, tool.spec, tool.args
        if kind == "workbook":
            task_def = self.playbook.task(str(spec["name"]))
            kind, spec = task_def.tool.kind, task_def.tool.spec
            args = {**task_def.tool.args, **args}
        values = ctx.build()
        rendered_args = self.renderer.render(args, values) if args else {}
        rendered_spec = render_spec(self.renderer, kind, spec, values)
        sinks = self._sinks(step, values)
        secrets: set[str] = set()
        if self._may_reference_secrets(step.step, kind, spec, args):
            secrets = referenced(rendered_args) | referenced(rendered_spec)
        for sink in sinks:
            secrets |= referenced(sink["spec"])
        suffix = f".{index}" if index is not None else ""
        item_key = index if key is None else key
        task_key = f"{state.execution_id}:{step.step}" + (
            f":{item_key}" if index is not None else ""
        )
        timeout = tool.timeout_ms or (step.loop.item_timeout_ms if step.loop else None)
        if timeout is None and kind != "playbook":  # a child execution waits as long as it takes
            in_loop = self.options.loop_item_timeout_ms if step.loop else None
            timeout = in_loop or self.options.tool_timeout_ms
        return Task(
            task_id=f"{state.execution_id}.{step.step}{suffix}",
            execution_id=state.execution_id,
            step=step.step,
            kind=kind,
            spec=rendered_spec,
            args=rendered_args,
            context=ctx.tool_view(),
            key=task_key,
            index=index,
            attempt=1,
            timeout_ms=timeout,
            secrets=tuple(sorted(secrets)),
            sinks=sinks,
            # The worker needs the pick only to compute what its sinks write.
            pick=step.result.pick if sinks and step.result is not None else None,
        )

    def _may_reference_secrets(
        self, name: str, kind: str, spec: dict[str, Any], args: dict[str, Any]
    ) -> bool:
        """Whether the step's tool templates mention `secrets` at all (cached by step).
        When they do not, the task lists no secrets, even if data rendered into it holds
        marker text: a marker stands for a secret only where a template put it."""
        known = self._secret_steps.get(name)
        if known is None:
            known = "secrets" in json.dumps([kind, spec, args], default=str)
            self._secret_steps[name] = known
        return known

    def _sinks(self, step: Step, values: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        """The step's `result.sink` entries as the worker runs them, specs rendered now."""
        if step.result is None or not step.result.sink:
            return ()
        return self._render_sinks(step.result.sink, values, "result.sink")

    def _render_sinks(
        self, entries: list[Sink], values: dict[str, Any], label: str
    ) -> tuple[dict[str, Any], ...]:
        """Sink entries as the worker runs them, specs rendered now (a TemplateError names
        `label[index]`).

        `args` is kept as a template: it may use `this` and `out`, which only the worker
        has. `policy.on_sink_fail: async_ignore` makes every sink best-effort; `fail_step`
        tries a sink without its own `retry` once. A sink without `retry` / `timeout_ms`
        gets the options' defaults."""
        all_async = self.policy.on_sink_fail == "async_ignore"
        default_retry = (
            {"max_attempts": 1} if self.policy.on_sink_fail == "fail_step" else self._sink_retry
        )
        if default_retry is not None:
            default_retry = dict(default_retry)  # each task gets its own copy
        sinks: list[dict[str, Any]] = []
        for index, sink in enumerate(entries):
            try:
                spec = render_spec(self.renderer, sink.kind, sink.spec, values)
            except TemplateError as exc:
                raise TemplateError(f"{label}[{index}]: {exc}") from None
            entry: dict[str, Any] = {
                "kind": sink.kind,
                "spec": spec,
                # the validator's default id (noetl.dsl.checks), so ids it checked are unique
                "id": sink.id or f"{sink.kind}_{index}",
                "async": sink.async_ or all_async,
                "timeout_ms": sink.timeout_ms or self.options.sink_timeout_ms,
                "retry": sink.retry.model_dump(mode="json") if sink.retry else default_retry,
            }
            if sink.args is not None:
                entry["args"] = sink.args
            sinks.append(entry)
        return tuple(sinks)

    # --- outcomes ------------------------------------------------------------------------

    def _on_lease_expired(self, state: ExecutionState, turn: _Turn, event: Event) -> None:
        """A worker lost its lease (crashed, stalled): run the task again, up to a limit.

        The reclaim counts as an attempt; past `max_lease_expiries` expiries in a row (with
        no outcome in between) the task fails, and its retries end there."""
        task_id = event.payload.get("task_id")
        entry = state.tasks.get(task_id) if isinstance(task_id, str) else None
        if entry is None or not isinstance(task_id, str):
            return  # already finished or canceled
        expired = state.reclaims.get(task_id, 0) + 1
        if expired >= self.max_lease_expiries:
            error = f"the worker's lease expired {expired} times (worker lost or stalled)"
            outcome = {
                "task_id": task_id,
                "ok": False,
                "error": error,
                "error_type": "LeaseExpired",
            }
            lost = Event(0, EventType.TOOL_PROCESSED, state.execution_id, turn.now, None, outcome)
            self._on_outcome(state, turn, lost, lease_lost=True)
            return
        attempt = state.attempts.get(task_id, 1) + 1
        payload = {
            "task_id": task_id,
            "attempt": attempt,
            "worker_id": event.payload.get("worker_id"),
        }
        self._emit(state, turn, EventType.TASK_RECLAIMED, entry[0], payload)
        turn.commands.append(RequeueTask(task_id, attempt))

    def _on_outcome(
        self, state: ExecutionState, turn: _Turn, event: Event, *, lease_lost: bool = False
    ) -> None:
        task_id = event.payload.get("task_id")
        entry = state.tasks.get(task_id) if isinstance(task_id, str) else None
        if entry is None or not isinstance(task_id, str):
            return  # a late or duplicate result: discarded
        name, index = entry
        payload = dict(event.payload)
        attempt = state.attempts.get(task_id, 1)
        if attempt > 1:
            payload.setdefault("attempt", attempt)  # a first attempt's payload stays as sent
        self._emit(state, turn, EventType.TOOL_PROCESSED, name, payload)
        ok = bool(payload.get("ok"))
        step = self.graph.nodes[name].step
        error = None if ok else str(payload.get("error") or "tool failed")
        done = Attempt(task_id, step, index, payload, attempt)
        if step.case and cases.on_outcome(self, state, turn, step, done, lease_lost=lease_lost):
            return  # a branch's task, or the tool an `on_event` case evaluates
        if lease_lost:
            verdict = Verdict(RetryAction.EXHAUSTED, reason="lease_expired")
        else:
            verdict = self._assess(state, done)
        if verdict.action is RetryAction.RETRY:
            self._retry(state, turn, done, verdict)
            return
        if verdict.action is RetryAction.EXHAUSTED:
            self._exhausted(state, turn, done, verdict)
        if verdict.error is not None:
            error = verdict.error if ok else f"{verdict.error} (the tool failed: {error})"
            ok = False
        if not ok and self.dead_letters:
            exhausted = verdict.reason if verdict.action is RetryAction.EXHAUSTED else None
            self._dead_letter(state, turn, done, exhausted, error)
        if index is None:
            self._finish_step(state, turn, name, ok=ok, this=payload.get("this"), error=error)
        else:
            self._record_item(
                state, turn, step, index, ok=ok, this=payload.get("this"), error=error
            )
            self._advance_loop(state, turn, step)

    # --- retries -------------------------------------------------------------------------

    def _assess(self, state: ExecutionState, done: Attempt) -> Verdict:
        """The retry policy's verdict on the outcome of one attempt of a task."""
        step, index = done.step, done.index
        rule = done.rule or self.retry_rules[step.step]
        if rule.retry_when is None and done.outcome.get("ok"):
            return FINISH  # the common case, decided without building anything
        run = state.steps[step.step]

        def check(condition: Condition, names: Mapping[str, Any]) -> bool:
            item = run.items[index] if index is not None else None
            ctx = self._ctx(state, step, run.bind, index=index, item=item)
            return self.renderer.truthy(condition, ctx.build(**names))

        key = jitter_key(state.execution_id, step.step, done.number, index)
        return assess(rule, done.outcome, done.number, check, step=step.step, key=key)

    def _retry(self, state: ExecutionState, turn: _Turn, done: Attempt, verdict: Verdict) -> None:
        """Seed 001's `step_retry`: the same task runs again, once `delay_s` has passed."""
        payload: dict[str, Any] = {"task_id": done.task_id}
        if done.index is not None:
            payload["index"] = done.index
        payload.update(
            attempt=done.number + 1,
            max_attempts=(done.rule or self.retry_rules[done.step.step]).max_attempts,
            delay_ms=round(verdict.delay_s * 1000),
            reason=verdict.reason,
        )
        payload.update(_failure(done.outcome))
        self._emit(state, turn, EventType.RETRY_STARTED, done.step.step, payload)
        turn.commands.append(RequeueTask(done.task_id, done.number + 1, verdict.delay_s))

    def _exhausted(
        self, state: ExecutionState, turn: _Turn, done: Attempt, verdict: Verdict
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
            payload["max_attempts"] = (done.rule or self.retry_rules[name]).max_attempts
        payload["kind"] = done.kind or self._kind(done.step)
        payload.update(_failure(done.outcome))
        if verdict.error is not None:
            payload["error"] = verdict.error
        self._emit(state, turn, EventType.RETRY_PROCESSED, name, payload)

    def _dead_letter(
        self,
        state: ExecutionState,
        turn: _Turn,
        done: Attempt,
        exhausted: str | None,
        error: str | None,
    ) -> None:
        """`task.dead_lettered`: the task failed for good; the runtime writes its DLQ
        entry (message id = task id) from this event in the same transaction."""
        name = done.step.step
        payload: dict[str, Any] = {"task_id": done.task_id}
        if done.index is not None:
            payload["index"] = done.index
            key = state.steps[name].keys.get(done.index)
            if key is not None:
                payload["key"] = key
        payload.update(
            reason=recovery.dead_letter_reason(done.outcome, exhausted),
            attempts=done.number,
            kind=done.kind or self._kind(done.step),
            error=error or "tool failed",
            error_type=done.outcome.get("error_type"),
        )
        sink = recovery.failed_sink(done.outcome)
        if sink is not None:
            payload["sink_id"] = sink
        self._emit(state, turn, EventType.TASK_DEAD_LETTERED, name, payload)

    def _kind(self, step: Step) -> str | None:
        """The kind of tool a step's tasks run (a workbook call: its task's tool)."""
        tool = step.tool
        if tool is None:
            return None
        if tool.kind == "workbook":
            try:
                return self.playbook.task(str(tool.spec.get("name"))).tool.kind
            except KeyError:
                return tool.kind
        return tool.kind

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

    def _record_item(
        self,
        state: ExecutionState,
        turn: _Turn,
        step: Step,
        index: int,
        *,
        ok: bool,
        this: Any,
        error: str | None,
    ) -> None:
        run = state.steps[step.step]
        assert step.loop is not None
        item = run.items[index]
        out = collect_key = None
        if ok:
            try:
                out, collect_key = self._outputs(state, step, this, index, item)
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
                ctx = self._ctx(state, step, run.bind, index=index, item=item)
                if self.renderer.truthy(step.loop.until, ctx.build(this=this, out=out)):
                    payload["stop"] = True
            except TemplateError as exc:
                payload["stop"] = True
                payload["until_error"] = str(exc)
        self._emit(state, turn, EventType.LOOP_ITERATION_FINISHED, step.step, payload)

    def _finish_loop(
        self, state: ExecutionState, turn: _Turn, step: Step, *, error: str | None = None
    ) -> None:
        """Finish a loop step by its success rule, or failed with `error` when given."""
        run = state.steps[step.step]
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
        outs = [run.outs.get(i) for i in range(run.next_index)]
        self._emit(
            state,
            turn,
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
            if cases.after_loop(self, state, turn, step, outcome):
                return  # its `on_event` case decides how the step ends
        self._finish_step(
            state,
            turn,
            step.step,
            ok=ok,
            result=outs,
            collected=self._loop_collected(run) if ok else None,
            error=error,
            picked=True,
        )

    def _loop_collected(self, run: StepRun) -> list[tuple[str | None, Any]]:
        """The outputs (with their `collect.key`) of a loop's successful items, in order."""
        successes = [i for i in range(run.next_index) if run.item_ok.get(i)]
        return [(run.collect_keys.get(i), run.outs[i]) for i in successes]

    # --- finishing and routing -----------------------------------------------------------

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
        if ok and not picked:
            try:
                result, collect_key = self._outputs(state, step, this, None, None)
                collected = [(collect_key, result)]
            except TemplateError as exc:
                ok, error = False, str(exc)
        if ok and step.result is not None and step.result.sink and step.tool is None:
            # Sinks run on the worker after the tool; without a tool nothing would write.
            ok, error = False, "result.sink needs a tool to run after (`tool: noop` will do)"
        if ok:
            payload["result"] = result
            updates = self._collect(state, step, collected or [])
            if updates:
                payload["context"] = updates
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
        taken: list[str] = []
        evaluated: list[dict[str, Any]] = []
        mode = step.next.mode if step.next else "inclusive"
        ctx = self._ctx(state, step).build() if step.edges else {}
        for edge in step.edges:
            fires, note = self._edge_fires(edge.when, ok, ctx)
            evaluated.append({"to": edge.step, "fired": fires, **note})
            if fires:
                taken.append(edge.step)
                if mode == "exclusive":
                    break
        payload: dict[str, Any] = {"mode": mode, "taken": taken}
        if evaluated:
            payload["edges"] = evaluated
        unhandled = not ok and not taken
        if unhandled:
            payload["on_step_fail"] = self.policy.on_step_fail
            if self.policy.on_step_fail == "halt":
                payload["unhandled_failure"] = True
        if taken or not ok or step.next is not None:
            self._emit(state, turn, EventType.NEXT_EVALUATED, step.step, payload)
        for target in taken:
            turn.calls.append((target, step.step))
        if unhandled:
            self._apply_failure_policy(state, turn, step.step)

    def _apply_failure_policy(self, state: ExecutionState, turn: _Turn, name: str) -> None:
        """A failed step no edge handled: halt (and maybe roll back), continue, or route."""
        action = self.policy.on_step_fail
        if action == "halt":
            if not self._start_rollback(state, turn, name):
                self._finish_workflow(state, turn, ExecutionStatus.FAIL, f"step '{name}' failed")
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
        return TemplateContext(state, step, bind or {}, index, item, key=key)

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


def _failure(outcome: dict[str, Any]) -> dict[str, Any]:
    """The error of a failed outcome, for retry events (nothing for a success)."""
    if outcome.get("ok"):
        return {}
    return {
        "error": str(outcome.get("error") or "tool failed"),
        "error_type": outcome.get("error_type"),
    }
