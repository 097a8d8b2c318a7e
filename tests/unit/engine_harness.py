"""A harness for the pure engine: a playbook from YAML text and a fake in-process worker.

The worker never runs a playbook's code. A test gives a Python callable per step that
answers that step's tasks (it receives the `Task` and returns `this`, or raises to fail), or
completes tasks by hand with an exact result or error, in any order (FIFO, LIFO or chosen).

After every decision the harness checks the core contract: event `seq` is gapless, and
folding every event emitted so far into a fresh state gives the engine's state.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from noetl.core import (
    CancelTasks,
    Decision,
    EnqueueTask,
    Event,
    EventType,
    ExecutionStatus,
    RequeueTask,
    StartTimer,
    Task,
)
from noetl.dsl import build_graph, load_playbook_text
from noetl.dsl.render import Renderer
from noetl.engine import Engine, ExecutionState, fold
from noetl.engine.options import EngineOptions
from noetl.engine.retry import RetryDefaults

Handler = Callable[[Task], Any]
Order = Literal["fifo", "lifo"]

HEADER = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: {name}
"""


def playbook_text(
    steps: str,
    *,
    name: str = "test",
    policy: str = "",
    workload: str = "",
    workbook: str = "",
) -> str:
    """A whole playbook from the YAML of its `workflow` list (and optional sections)."""
    parts = [HEADER.format(name=name)]
    for key, body in (("workload", workload), ("workbook", workbook), ("policy", policy)):
        if body:
            parts.append(f"{key}:\n{textwrap.indent(textwrap.dedent(body).strip(), '  ')}\n")
    parts.append(f"workflow:\n{textwrap.indent(textwrap.dedent(steps).strip(), '  ')}\n")
    return "".join(parts)


class WorkerError(Exception):
    """Raise from a handler to fail a task with exactly this message."""


class TaskFailure(Exception):
    """Raise from a handler to fail a task with this message, error type and retryability."""

    def __init__(self, error: str, error_type: str, *, retryable: bool = False) -> None:
        super().__init__(error)
        self.error = error
        self.error_type = error_type
        self.retryable = retryable


@dataclass
class Harness:
    """Drives one execution of one playbook through the engine."""

    engine: Engine
    state: ExecutionState
    handlers: dict[str, Handler] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    inputs: list[Event] = field(default_factory=list)
    commands: list[EnqueueTask | CancelTasks | RequeueTask | StartTimer] = field(
        default_factory=list
    )
    requeued: list[RequeueTask] = field(default_factory=list)
    timers: list[StartTimer] = field(default_factory=list)
    dispatched: list[Task] = field(default_factory=list)
    pending: list[Task] = field(default_factory=list)
    canceled: list[str] = field(default_factory=list)
    clock: float = 0.0
    shadow: ExecutionState | None = None

    # --- construction ------------------------------------------------------------------

    @classmethod
    def from_text(
        cls,
        text: str,
        *,
        handlers: dict[str, Handler] | None = None,
        workload: dict[str, Any] | None = None,
        execution_id: str = "e1",
        renderer: Renderer | None = None,
        retry_defaults: RetryDefaults | None = None,
        options: EngineOptions | None = None,
        check_names: bool = True,
    ) -> Harness:
        """`check_names=False` for a playbook that reads an undefined name on purpose (to
        test what a run does with it), which validation would refuse (E313)."""
        playbook = load_playbook_text(text, check_names=check_names).require()
        engine = Engine(
            build_graph(playbook), renderer, retry_defaults=retry_defaults, options=options
        )
        return cls(
            engine=engine,
            state=engine.new_state(execution_id),
            handlers=dict(handlers or {}),
            workload={**playbook.workload, **(workload or {})},
        )

    @classmethod
    def of(
        cls,
        steps: str,
        *,
        handlers: dict[str, Handler] | None = None,
        workload: dict[str, Any] | None = None,
        policy: str = "",
        workbook: str = "",
        renderer: Renderer | None = None,
        start: bool = True,
        retry_defaults: RetryDefaults | None = None,
        options: EngineOptions | None = None,
        check_names: bool = True,
    ) -> Harness:
        """Build from the YAML of the workflow steps, and start it (unless `start=False`)."""
        text = playbook_text(steps, policy=policy, workbook=workbook)
        harness = cls.from_text(
            text,
            handlers=handlers,
            workload=workload,
            renderer=renderer,
            retry_defaults=retry_defaults,
            options=options,
            check_names=check_names,
        )
        if start:
            harness.start()
        return harness

    # --- inputs ------------------------------------------------------------------------

    def _tick(self) -> float:
        self.clock += 1.0
        return self.clock

    def start(self) -> Decision:
        decision = self.engine.start(self.state, self.workload, self.clock)
        return self._absorb(decision)

    def deliver(self, event: Event) -> Decision:
        """Feed one input event to the engine."""
        self.inputs.append(event)
        decision = self.engine.decide(self.state, event, self._tick())
        return self._absorb(decision)

    def outcome(
        self, task_id: str, *, ok: bool, this: Any = None, error: str | None = None, **extra: Any
    ) -> Decision:
        """Report a task outcome (`tool.processed`) for any task id, known or not (`extra`
        keys, such as `error_type` and `retryable`, are added to the payload)."""
        payload = {"task_id": task_id, "ok": ok, "this": this, "error": error, **extra}
        event = Event(
            0, EventType.TOOL_PROCESSED.value, self.state.execution_id, 0.0, None, payload
        )
        self.pending = [t for t in self.pending if t.task_id != task_id]
        return self.deliver(event)

    def input(self, event_type: str, payload: dict[str, Any]) -> Decision:
        """Feed an input of any type with `payload`."""
        event = Event(0, event_type, self.state.execution_id, 0.0, None, payload)
        return self.deliver(event)

    def replay(self, task: Task, *, by: str = "ops", **patch: Any) -> Decision:
        """Replay a dead-lettered task (its args updated with `patch`), as the DLQ does."""
        data = task.to_dict()
        data["args"] = {**data["args"], **patch}
        payload = {"task": data, "message_id": task.task_id, "by": by}
        if patch:
            payload["patched"] = [f"args.{key}" for key in patch]
        return self.input(EventType.TASK_REPLAYED, payload)

    def force(self, step: str, **payload: Any) -> Decision:
        """Force-complete `step` (payload: status, result, reason, by)."""
        return self.input(EventType.STEP_FORCE_COMPLETED, {"step": step, **payload})

    def fire(self, timer: StartTimer) -> Decision:
        """Deliver a timer's `timer.fired` input."""
        return self.input(EventType.TIMER_FIRED, dict(timer.payload))

    def cancel(self, reason: str = "user") -> Decision:
        event = Event(
            0,
            EventType.CANCEL_REQUESTED.value,
            self.state.execution_id,
            0.0,
            None,
            {"reason": reason},
        )
        return self.deliver(event)

    def _absorb(self, decision: Decision) -> Decision:
        self.events.extend(decision.events)
        for command in decision.commands:
            self.commands.append(command)
            if isinstance(command, EnqueueTask):
                self.dispatched.append(command.task)
                self.pending.append(command.task)
            elif isinstance(command, CancelTasks):
                self.canceled.extend(command.task_ids)
                self.pending = [t for t in self.pending if t.task_id not in command.task_ids]
            elif isinstance(command, RequeueTask):
                # A task still pending (a lost lease) stays so; one that reported an outcome
                # (a retry, a replay) is pending again, with its next attempt.
                self.requeued.append(command)
                if command.task_id not in self.pending_ids():
                    first = command.task or next(
                        t for t in self.dispatched if t.task_id == command.task_id
                    )
                    self.pending.append(dataclasses.replace(first, attempt=command.attempt))
            elif isinstance(command, StartTimer):
                self.timers.append(command)
        self.check_contract()
        return decision

    # --- the fake worker ---------------------------------------------------------------

    def task(self, step: str, index: int | None = None) -> Task:
        """The pending task of a step (and loop index)."""
        found = [t for t in self.pending if t.step == step and t.index == index]
        assert len(found) == 1, f"no single pending task for {step}[{index}]: {self.pending}"
        return found[0]

    def pending_ids(self) -> list[str]:
        return [t.task_id for t in self.pending]

    def complete(self, step: str, index: int | None = None, *, this: Any = None) -> Decision:
        """Complete the pending task of `step` (and `index`) with `this`."""
        return self.outcome(self.task(step, index).task_id, ok=True, this=this)

    def fail(self, step: str, index: int | None = None, *, error: str = "boom") -> Decision:
        """Fail the pending task of `step` (and `index`) with `error`."""
        return self.outcome(self.task(step, index).task_id, ok=False, error=error)

    def answer(self, task: Task) -> Decision:
        """Answer a task the way the worker would: its step's handler, else echo its args."""
        handler = self.handlers.get(task.step)
        if handler is None:
            if task.kind == "python":
                raise AssertionError(f"no handler for python step '{task.step}'")
            return self.outcome(task.task_id, ok=True, this=task.args)
        try:
            this = handler(task)
        except TaskFailure as exc:
            return self.outcome(
                task.task_id,
                ok=False,
                error=exc.error,
                error_type=exc.error_type,
                retryable=exc.retryable,
            )
        except Exception as exc:
            return self.outcome(task.task_id, ok=False, error=str(exc))
        return self.outcome(task.task_id, ok=True, this=this)

    def answer_step(self, step: str, index: int | None = None) -> Decision:
        return self.answer(self.task(step, index))

    def run(self, order: Order = "fifo", *, limit: int = 10_000) -> ExecutionState:
        """Answer pending tasks one at a time (oldest or newest first) until none is left."""
        for _ in range(limit):
            if not self.pending:
                return self.state
            self.answer(self.pending[0] if order == "fifo" else self.pending[-1])
        raise AssertionError("the execution did not settle")

    # --- looking at what happened ------------------------------------------------------

    @property
    def status(self) -> ExecutionStatus:
        return self.state.status

    def steps(self) -> dict[str, dict[str, Any]]:
        return self.state.step_summaries()

    def step_status(self, name: str) -> str:
        return self.state.steps[name].status.value

    def of_type(self, event_type: str, step: str | None = None) -> list[Event]:
        return [e for e in self.events if e.type == event_type and (step is None or e.step == step)]

    def trace(self, events: Iterable[Event] | None = None) -> list[tuple[str, str | None]]:
        """(type, step) of every event, in order: the shape of what happened."""
        return [(e.type, e.step) for e in (self.events if events is None else events)]

    def started_steps(self) -> list[str]:
        return [e.step or "" for e in self.of_type(EventType.STEP_STARTED)]

    def finished(self, name: str) -> Event:
        found = self.of_type(EventType.STEP_FINISHED, name)
        assert len(found) == 1, f"step '{name}' finished {len(found)} times"
        return found[0]

    def check_contract(self) -> None:
        """Gapless seq from 1, and the fold of the events equals the engine's state.

        The fold is incremental (a shadow state fed each new event once), so the check stays
        linear in the length of the log; `fold` itself checks that `seq` has no gap.
        """
        if self.shadow is None:
            self.shadow = self.engine.new_state(self.state.execution_id)
        fold(self.shadow, self.events[self.shadow.seq :])
        assert self.shadow.seq == len(self.events)
        assert self.shadow.status == self.state.status
        assert self.shadow.step_summaries() == self.state.step_summaries()
        assert self.shadow.context == self.state.context
        assert self.shadow == self.state

    def check_full_fold(self) -> None:
        """The fold of the whole log into a fresh state equals the engine's state."""
        folded = fold(self.engine.new_state(self.state.execution_id), self.events)
        assert [e.seq for e in self.events] == list(range(1, len(self.events) + 1))
        assert folded == self.state
