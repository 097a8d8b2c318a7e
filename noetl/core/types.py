"""Values that cross the engine's boundary: events, tasks, commands, outcomes.

They live in `noetl.core` (the bottom layer) because every layer speaks them: the engine
decides with them, the store keeps them, workers and tools run and report them.

Everything here is plain data (JSON-safe payloads), so events can be stored, replayed and
compared byte for byte, and tasks can be sent to another process or machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    """Event types (dotted names). Inputs come from outside; the engine emits the rest."""

    # inputs
    WORKFLOW_STARTED = "workflow.started"
    TOOL_PROCESSED = "tool.processed"
    CANCEL_REQUESTED = "workflow.cancel_requested"
    LEASE_EXPIRED = "task.lease_expired"
    # an operator replays a dead-lettered task (recorded as is when accepted)
    TASK_REPLAYED = "task.replayed"
    # an operator marks a step done (recorded as is when accepted)
    STEP_FORCE_COMPLETED = "step.force_completed"
    TIMER_FIRED = "timer.fired"
    # emitted by the engine
    WORKFLOW_FINISHED = "workflow.finished"
    STEP_CALLED = "step.called"
    STEP_PARKED = "step.parked"
    STEP_STARTED = "step.started"
    STEP_FINISHED = "step.finished"
    STEP_SKIPPED = "step.skipped"
    LOOP_STARTED = "loop.started"
    LOOP_ITERATION_STARTED = "loop.iteration.started"
    LOOP_ITERATION_FINISHED = "loop.iteration.finished"
    LOOP_FINISHED = "loop.finished"
    NEXT_EVALUATED = "next.evaluated"
    TASK_CANCELED = "task.canceled"
    TASK_RECLAIMED = "task.reclaimed"
    # seed 001's step_retry (a task runs again) and step_retry_exhausted (status exhausted)
    RETRY_STARTED = "retry.started"
    RETRY_PROCESSED = "retry.processed"
    COMPENSATION_STARTED = "compensation.started"
    # a task failed for good: its dead-letter entry is written with the decision
    TASK_DEAD_LETTERED = "task.dead_lettered"
    # a replay reopened a failed execution (before its `task.replayed`)
    WORKFLOW_REOPENED = "workflow.reopened"
    # an operator's replay or force-complete that the state no longer allows
    OPERATOR_REFUSED = "operator.refused"
    LOOP_TIMED_OUT = "loop.timed_out"
    # a step's `case` (seed 004): one round of evaluation begins; which branches matched
    # and fired; what one fired branch did (its context values, its task); the final
    # outcome of a branch's task (see noetl.engine.cases)
    CASE_STARTED = "case.started"
    CASE_EVALUATED = "case.evaluated"
    CASE_BRANCH_STARTED = "case.branch.started"
    CASE_BRANCH_FINISHED = "case.branch.finished"
    # the step's own task, dispatched once its `on_entry` case is done
    TOOL_STARTED = "tool.started"
    # a task's sinks handed off to a `sinks` task of their own pool (`Task.sinks_pool`)
    SINK_STARTED = "sink.started"


class ExecutionStatus(StrEnum):
    RUNNING = "running"
    OK = "ok"
    FAIL = "fail"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        return self is not ExecutionStatus.RUNNING


class StepStatus(StrEnum):
    PENDING = "pending"  # never called
    PARKED = "parked"  # called, gate false
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    SKIPPED = "skipped"  # still parked or never called when the execution finished
    CANCELED = "canceled"

    @property
    def done(self) -> bool:
        return self in (StepStatus.OK, StepStatus.FAILED, StepStatus.SKIPPED, StepStatus.CANCELED)


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of an execution's append-only log. `seq` is gapless per execution."""

    seq: int
    type: str
    execution_id: str
    ts: float
    step: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.type,
            "execution_id": self.execution_id,
            "ts": self.ts,
            "step": self.step,
            "payload": self.payload,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Event:
        return cls(
            seq=int(data["seq"]),
            type=str(data["type"]),
            execution_id=str(data["execution_id"]),
            ts=float(data["ts"]),
            step=data.get("step"),
            payload=dict(data.get("payload") or {}),
        )


# The internal tool kind of a task that runs another task's handed-off sinks
# (`Task.sinks_pool`; noetl.engine.handoff). Not a kind a playbook may name.
SINKS_KIND = "sinks"


@dataclass(frozen=True, slots=True)
class Task:
    """A unit of work for a worker: one tool call (one loop item, one attempt).

    `key` is the idempotency key `{execution_id}:{step}[:{index}]`; `task_id` is unique per
    dispatch and is what a result must quote to be accepted.

    `sinks` are the step's `result.sink` entries, run by the worker after the tool (each a
    map: `kind`, rendered `spec`, `id`, `async`, `timeout_ms`, `retry`, and the raw `args`
    template when given; see `noetl.sinks`); `pick` is the raw `result.pick` template the
    worker applies to `this` to get the `out` the sinks write. Both are empty for a step
    without sinks, and left out of `to_dict` then.

    `select` is the step's `result.select`: the fields of the result the worker reports,
    after keeping the whole result in the result store (its reference as `_ref`); empty
    for a step without one, and left out of `to_dict` then.

    `sinks_pool`, when set, hands the sinks off: the worker runs the tool only, and the
    engine then queues a `sinks` task in that pool (the server's, with
    `sinks.in_worker: false`) that writes the result. `pool` routes a task to a pool of
    its own instead of its execution's (such a `sinks` task). Both are None for every
    other task, and left out of `to_dict` then.

    `trace` is the W3C `traceparent` of the task's `server.dispatch` span when its execution
    is traced (set by the runtime when it queues the task, see
    `noetl.observability.trace_context`); None otherwise, and left out of `to_dict` then.
    """

    task_id: str
    execution_id: str
    step: str
    kind: str
    spec: dict[str, Any]
    args: dict[str, Any]
    context: dict[str, Any]
    key: str
    index: int | None = None
    attempt: int = 1
    timeout_ms: int | None = None
    # Names of the secrets whose markers the rendered spec and args hold (resolved by the
    # worker just before the call; see noetl.core.secrets).
    secrets: tuple[str, ...] = ()
    sinks: tuple[dict[str, Any], ...] = ()
    pick: Any = None
    trace: str | None = None
    select: tuple[str, ...] = ()
    sinks_pool: str | None = None
    pool: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = self._fields()
        if self.secrets:
            data["secrets"] = list(self.secrets)
        if self.sinks:
            data["sinks"] = list(self.sinks)
        if self.pick is not None:
            data["pick"] = self.pick
        if self.trace is not None:
            data["trace"] = self.trace
        if self.select:
            data["select"] = list(self.select)
        if self.sinks_pool is not None:
            data["sinks_pool"] = self.sinks_pool
        if self.pool is not None:
            data["pool"] = self.pool
        return data

    def _fields(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "execution_id": self.execution_id,
            "step": self.step,
            "kind": self.kind,
            "spec": self.spec,
            "args": self.args,
            "context": self.context,
            "key": self.key,
            "index": self.index,
            "attempt": self.attempt,
            "timeout_ms": self.timeout_ms,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        return cls(
            task_id=data["task_id"],
            execution_id=data["execution_id"],
            step=data["step"],
            kind=data["kind"],
            spec=dict(data.get("spec") or {}),
            args=dict(data.get("args") or {}),
            context=dict(data.get("context") or {}),
            key=data["key"],
            index=data.get("index"),
            attempt=int(data.get("attempt", 1)),
            timeout_ms=data.get("timeout_ms"),
            secrets=tuple(data.get("secrets") or ()),
            sinks=tuple(dict(s) for s in data.get("sinks") or ()),
            pick=data.get("pick"),
            trace=data["trace"] if isinstance(data.get("trace"), str) else None,
            select=tuple(str(name) for name in data.get("select") or ()),
            sinks_pool=_text(data.get("sinks_pool")),
            pool=_text(data.get("pool")),
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a worker reports for a task.

    `sinks` holds one summary per sink the task ran (see `noetl.sinks`); the payload has
    the key only when there are some.

    `ctx` is a patch of the execution's variables (`ctx.*` of upstream playbooks) that the
    task sets, as `{name: value}`: the engine applies it when it records the outcome, so
    later steps' templates read the values. The payload has the key only when it is not
    empty.

    `retry` is a retry a pipeline's policy rule asks for (`{task, try, attempts, delay_s}`)
    or says it ran out of (`{task, attempts, exhausted: true}`); the engine decides it as
    every retry (events, backoff timer, dead letter when exhausted). `tasks` lists the
    pipeline's task runs in this attempt (`{task, try, attempt, ok, do, ...}`). Both are
    in the payload only when set.
    """

    task_id: str
    ok: bool
    this: Any = None
    error: str | None = None
    error_type: str | None = None
    retryable: bool = False
    stdout: str = ""
    duration_ms: float = 0.0
    sinks: tuple[dict[str, Any], ...] = ()
    ctx: dict[str, Any] = field(default_factory=dict)
    retry: dict[str, Any] | None = None
    tasks: tuple[dict[str, Any], ...] = ()

    def to_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"task_id": self.task_id, "ok": self.ok, "this": self.this}
        if not self.ok:
            payload["error"] = self.error
            payload["error_type"] = self.error_type
            payload["retryable"] = self.retryable
        if self.stdout:
            payload["stdout"] = self.stdout
        if self.sinks:
            payload["sinks"] = list(self.sinks)
        if self.ctx:
            payload["ctx"] = dict(self.ctx)
        if self.retry is not None:
            payload["retry"] = dict(self.retry)
        if self.tasks:
            payload["tasks"] = list(self.tasks)
        payload["duration_ms"] = round(self.duration_ms, 3)
        return payload


@dataclass(frozen=True, slots=True)
class EnqueueTask:
    task: Task


@dataclass(frozen=True, slots=True)
class CancelTasks:
    task_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RequeueTask:
    """Put a task back in the queue for another attempt (same task id). `task`, when
    given, replaces the queued task (a replay from the dead-letter queue, possibly
    patched); the runtime then need not know the task from before."""

    task_id: str
    attempt: int
    delay_s: float = 0.0
    task: Task | None = None


@dataclass(frozen=True, slots=True)
class StartTimer:
    """Deliver a `timer.fired` input with `payload` to this execution after `delay_s`
    (a loop's total budget). A timer that fires after the execution ended is dropped."""

    delay_s: float
    payload: dict[str, Any]


Command = EnqueueTask | CancelTasks | RequeueTask | StartTimer


@dataclass(frozen=True, slots=True)
class Decision:
    """What the engine decided for one input: events to append (in order) and commands."""

    events: list[Event]
    commands: list[Command]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
