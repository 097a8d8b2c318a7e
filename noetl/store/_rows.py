"""What every adapter shares: JSON encoding, append validation, row <-> record mapping.

Adapters store JSON as text produced by `dumps`, so the memory store behaves like the
databases (tuples come back as lists, non-JSON values fail at commit, callers cannot mutate
stored state through returned objects).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from noetl.core import Event, ExecutionStatus, Task
from noetl.core.errors import UNDECODABLE_ERROR
from noetl.store._json import dumps, loads
from noetl.store.base import (
    Append,
    ConcurrencyError,
    DeadLetter,
    DeadLetterStatus,
    Enqueue,
    ExecutionRecord,
    Input,
    InputKind,
    Lease,
    TaskStatus,
    WorkerRecord,
)

# Column order of `execution` as the adapters read and write it.
EXECUTION_COLUMNS = (
    "execution_id",
    "playbook_name",
    "playbook_path",
    "playbook_text",
    "status",
    "context",
    "parent_execution_id",
    "last_seq",
    "created_at",
    "updated_at",
    "finished_at",
)

# Column order of `task_queue` as `get_task` returns it.
TASK_COLUMNS = (
    "task_id",
    "execution_id",
    "step",
    "pool",
    "priority",
    "status",
    "attempt",
    "lease_token",
    "lease_expires_at",
    "worker_id",
    "cancel_requested",
    "not_before",
    "payload",
)
WORKER_COLUMNS = ("worker_id", "pool", "hostname", "pid", "status", "started_at", "heartbeat_at")
# Column order of `dlq` as the adapters read and write it (`updated_at` is set apart).
DLQ_COLUMNS = (
    "message_id",
    "execution_id",
    "step_id",
    "loop_index",
    "loop_key",
    "tool_kind",
    "sink_id",
    "attempts",
    "reason",
    "error_type",
    "last_error",
    "last_stack",
    "first_seen",
    "last_seen",
    "payload",
    "context_excerpt",
    "task",
    "status",
    "replays",
    "discard_reason",
)
DLQ_JSON_COLUMNS = frozenset({"loop_key", "payload", "task"})
WORKER_STATUSES = ("running", "draining", "stopped")
CHANNELS = ("tasks", "inputs")

EventRow = tuple[str, int, str, float, str | None, str]
StepRow = tuple[str, str, str, float]
# (task_id, execution_id, step, pool, priority, attempt, payload_json, delay_s)
TaskRow = tuple[str, str, str, str, int, int, str, float]
# (task_id, attempt, delay_s)
RequeueRow = tuple[str, int, float]
# (delay_s, payload_json)
TimerRow = tuple[float, str]
# DLQ_COLUMNS, JSON columns encoded
DeadLetterRow = tuple[Any, ...]


# How an adapter encodes a JSON column: `dumps`, or for PostgreSQL `dumps` with NUL escaped.
Encode = Callable[[Any], str]


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    """An `Append` validated and encoded once, before any lock or transaction is taken."""

    execution_id: str
    expected_seq: int
    last_seq: int
    events: list[EventRow]
    status: ExecutionStatus | None
    finished: bool
    steps: list[StepRow]
    context: str | None
    now: float
    # Queue changes, applied in this order after the expected_seq check.
    enqueue: list[TaskRow]
    requeue: list[RequeueRow]
    cancel_tasks: list[str]
    inputs_done: list[int]
    timers: list[TimerRow]
    dead_letters: list[DeadLetterRow]
    dead_letter_status: list[tuple[str, str]]  # (message_id, status)

    @property
    def wakes_workers(self) -> bool:
        """True when this append makes tasks claimable (the "tasks" channel)."""
        return bool(self.enqueue or self.requeue)


def prepare(append: Append, encode: Encode = dumps) -> PreparedAppend:
    """Check that the events continue `expected_seq` without gaps and encode them (every
    JSON column with `encode`).

    Raises ValueError for a gap, a repeated or out-of-order seq, or an event or a new task
    of another execution: those are bugs in the caller, not races.
    """
    execution_id = append.execution_id
    expected = append.expected_seq
    if expected < 0:
        raise ValueError(f"expected_seq must be >= 0, got {expected}")
    rows: list[EventRow] = []
    for offset, event in enumerate(append.events, start=1):
        if event.seq != expected + offset:
            raise ValueError(
                f"execution {execution_id}: event #{offset} has seq {event.seq}, expected "
                f"{expected + offset} (events must continue expected_seq={expected} "
                "without gaps)"
            )
        if event.execution_id != execution_id:
            raise ValueError(
                f"event seq {event.seq} belongs to execution {event.execution_id}, "
                f"not {execution_id}"
            )
        rows.append(
            (execution_id, event.seq, event.type, event.ts, event.step, encode(event.payload))
        )
    status = None if append.status is None else ExecutionStatus(append.status)
    now = append.now
    return PreparedAppend(
        execution_id=execution_id,
        expected_seq=expected,
        last_seq=expected + len(rows),
        events=rows,
        status=status,
        finished=status is not None and status.terminal,
        steps=[(execution_id, step, encode(value), now) for step, value in append.steps.items()],
        context=None if append.context is None else encode(append.context),
        now=now,
        enqueue=[_task_row(execution_id, item, encode) for item in append.enqueue],
        requeue=[(item.task_id, item.attempt, item.delay_s) for item in append.requeue],
        cancel_tasks=list(append.cancel_tasks),
        inputs_done=list(append.inputs_done),
        timers=[(float(timer.delay_s), encode(timer.payload)) for timer in append.timers],
        dead_letters=[_dead_letter_row(execution_id, d, encode) for d in append.dead_letters],
        dead_letter_status=[
            (message_id, DeadLetterStatus(status).value)
            for message_id, status in append.dead_letter_status.items()
        ],
    )


def _dead_letter_row(execution_id: str, entry: DeadLetter, encode: Encode) -> DeadLetterRow:
    if entry.execution_id != execution_id:
        raise ValueError(
            f"dead letter {entry.message_id} belongs to execution {entry.execution_id}, "
            f"not {execution_id}"
        )
    return dead_letter_row(entry, encode)


def dead_letter_row(entry: DeadLetter, encode: Encode = dumps) -> DeadLetterRow:
    """A DeadLetter as a `dlq` row in DLQ_COLUMNS order (JSON columns encoded)."""
    values = {
        "message_id": entry.message_id,
        "execution_id": entry.execution_id,
        "step_id": entry.step,
        "loop_index": entry.loop_index,
        "loop_key": None if entry.loop_key is None else encode(entry.loop_key),
        "tool_kind": entry.tool_kind,
        "sink_id": entry.sink_id,
        "attempts": entry.attempts,
        "reason": entry.reason,
        "error_type": entry.error_type,
        "last_error": entry.last_error,
        "last_stack": entry.last_stack,
        "first_seen": entry.first_seen,
        "last_seen": entry.last_seen,
        "payload": encode(entry.payload),
        "context_excerpt": entry.context_excerpt,
        "task": encode(entry.task),
        "status": DeadLetterStatus(entry.status).value,
        "replays": entry.replays,
        "discard_reason": entry.discard_reason,
    }
    return tuple(values[column] for column in DLQ_COLUMNS)


def dead_letter_from_row(row: Sequence[Any]) -> DeadLetter:
    """A `dlq` row (DLQ_COLUMNS order; JSON columns as text, times as epoch seconds)."""
    values = dict(zip(DLQ_COLUMNS, row, strict=True))
    for column in DLQ_JSON_COLUMNS:
        if values[column] is not None:
            values[column] = loads(values[column])
    return DeadLetter(
        message_id=values["message_id"],
        execution_id=values["execution_id"],
        step=values["step_id"],
        loop_index=values["loop_index"],
        loop_key=values["loop_key"],
        tool_kind=values["tool_kind"],
        sink_id=values["sink_id"],
        attempts=values["attempts"],
        reason=values["reason"],
        error_type=values["error_type"],
        last_error=values["last_error"],
        last_stack=values["last_stack"],
        payload=values["payload"],
        context_excerpt=values["context_excerpt"],
        task=values["task"],
        first_seen=float(values["first_seen"]),
        last_seen=float(values["last_seen"]),
        status=DeadLetterStatus(values["status"]),
        replays=values["replays"],
        discard_reason=values["discard_reason"],
    )


def prepare_initial(
    record: ExecutionRecord, initial: Append | None, encode: Encode = dumps
) -> PreparedAppend | None:
    """`prepare` the initial append of a new execution (it must be for that execution)."""
    if initial is None:
        return None
    if initial.execution_id != record.execution_id:
        raise ValueError(
            f"the initial append is for execution {initial.execution_id}, not {record.execution_id}"
        )
    return prepare(initial, encode)


def stale(item: PreparedAppend, current: int) -> ConcurrencyError:
    """The error of an append whose expected_seq is not the stored last sequence."""
    return ConcurrencyError(
        f"execution {item.execution_id}: expected last seq {item.expected_seq}, "
        f"store has {current}",
        [item.execution_id],
    )


def stale_all(
    stale_items: Sequence[tuple[PreparedAppend, int]],
    consumed: Sequence[tuple[int, str]] = (),
) -> ConcurrencyError:
    """One error naming every stale append of a commit (the first one in the message) and
    every input another commit consumed already (`consumed`: (input id, execution id))."""
    executions = list(dict.fromkeys([item.execution_id for item, _ in stale_items]))
    texts = []
    if stale_items:
        texts.append(str(stale(*stale_items[0])))
    if consumed:
        first = consumed[0][1]
        ids = ", ".join(str(i) for i, e in consumed if e == first)
        texts.append(
            f"execution {first}: input {ids} was consumed by another commit (decided elsewhere)"
        )
        executions += [e for _, e in consumed if e not in executions]
    more = len(executions) - 1
    text = "; ".join(texts) + (f" (and {more} more executions)" if more else "")
    return ConcurrencyError(text, executions, sorted({i for i, _ in consumed}))


def inputs_to_check(prepared: Sequence[PreparedAppend]) -> list[tuple[int, str]]:
    """The (input id, execution id) pairs a commit must find in the inbox: the inputs
    consumed by appends that record events (an input is decided once; an append without
    events may name inputs already gone)."""
    return [
        (input_id, item.execution_id)
        for item in prepared
        if item.events
        for input_id in item.inputs_done
    ]


def _task_row(execution_id: str, item: Enqueue, encode: Encode) -> TaskRow:
    task = item.task
    if task.execution_id != execution_id:
        raise ValueError(
            f"task {task.task_id} belongs to execution {task.execution_id}, not {execution_id}"
        )
    return (
        task.task_id,
        execution_id,
        task.step,
        item.pool,
        item.priority,
        task.attempt,
        encode({**task.to_dict(), "solo": True} if item.solo else task.to_dict()),
        item.delay_s,
    )


def event_from_row(execution_id: str, row: tuple[Any, ...]) -> Event:
    """Build an Event from (seq, type, ts, step, payload_json)."""
    seq, type_, ts, step, payload = row
    return Event(
        seq=seq, type=type_, execution_id=execution_id, ts=ts, step=step, payload=loads(payload)
    )


def record_to_row(record: ExecutionRecord, encode: Encode = dumps) -> dict[str, Any]:
    """The `execution` columns for a new record (JSON columns encoded with `encode`)."""
    if record.last_seq != 0:
        raise ValueError(
            f"a new execution starts at last_seq 0, got {record.last_seq} for {record.execution_id}"
        )
    return {
        "execution_id": record.execution_id,
        "playbook_name": record.playbook_name,
        "playbook_path": record.playbook_path,
        "playbook_text": record.playbook_text,
        "status": ExecutionStatus(record.status).value,
        "context": encode(record.context),
        "parent_execution_id": record.parent_execution_id,
        "last_seq": 0,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "finished_at": record.finished_at,
    }


def record_from_row(row: Mapping[str, Any]) -> ExecutionRecord:
    """Build an ExecutionRecord from `execution` columns (JSON columns decoded)."""
    return ExecutionRecord(
        execution_id=row["execution_id"],
        playbook_name=row["playbook_name"],
        playbook_path=row["playbook_path"],
        playbook_text=row["playbook_text"],
        status=ExecutionStatus(row["status"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
        parent_execution_id=row["parent_execution_id"],
        last_seq=row["last_seq"],
        context=loads(row["context"]),
        pruned_at=row.get("pruned_at"),
    )


def check_page(limit: int | None, offset: int = 0) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")


def task_from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A `task_queue` row as `get_task` returns it (status typed, payload decoded)."""
    task = {column: row[column] for column in TASK_COLUMNS}
    task["status"] = TaskStatus(row["status"])
    task["cancel_requested"] = bool(row["cancel_requested"])
    task["payload"] = loads(row["payload"])
    return task


def undecodable_outcome(task_id: str, exc: Exception) -> str:
    """The OUTCOME input (JSON) of a claimed task whose payload could not be decoded (a
    poison message): its error type makes it fatal, so it goes to the dead-letter queue
    at once instead of failing every claim that meets it."""
    detail = f"{type(exc).__name__}: {exc}"[:500]
    return dumps(
        {
            "task_id": task_id,
            "ok": False,
            "this": None,
            "error": f"the queued task could not be decoded ({detail})",
            "error_type": UNDECODABLE_ERROR,
            "retryable": False,
            "duration_ms": 0.0,
        }
    )


def try_lease(row: Mapping[str, Any]) -> Lease | Exception:
    """`lease_from_row`, or the error that says why the row's task cannot be decoded."""
    try:
        return lease_from_row(row)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return exc


def lease_from_row(row: Mapping[str, Any]) -> Lease:
    """The Lease of a just-claimed row: the stored task with the row's attempt."""
    data = loads(row["payload"])
    data["attempt"] = row["attempt"]
    return Lease(
        task=Task.from_dict(data),
        token=row["lease_token"],
        expires_at=row["lease_expires_at"],
        worker_id=row["worker_id"],
        solo=bool(data.get("solo", False)),
        ready_at=row.get("not_before"),
    )


def input_from_row(row: Mapping[str, Any]) -> Input:
    return Input(
        id=row["id"],
        execution_id=row["execution_id"],
        kind=InputKind(row["kind"]),
        payload=loads(row["payload"]),
        created_at=row["created_at"],
    )


def expired_payload(row: Mapping[str, Any]) -> str:
    """The LEASE_EXPIRED input of a reaped task row."""
    return dumps(
        {"task_id": row["task_id"], "attempt": row["attempt"], "worker_id": row["worker_id"]}
    )


def worker_from_row(row: Sequence[Any]) -> WorkerRecord:
    return WorkerRecord(*row)


def check_worker(record: WorkerRecord) -> None:
    if record.status not in WORKER_STATUSES:
        raise ValueError(
            f"worker {record.worker_id}: status must be one of {', '.join(WORKER_STATUSES)}, "
            f"got {record.status!r}"
        )


def check_channel(channel: str) -> None:
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}; expected one of {', '.join(CHANNELS)}")


def family(root: str, parents: Iterable[tuple[str, str | None]]) -> list[str]:
    """`root` and its descendants, given every (execution id, parent id); [] when `root`
    is not among them. Breadth first, `root` first."""
    children: dict[str, list[str]] = {}
    known: set[str] = set()
    for execution_id, parent in parents:
        known.add(execution_id)
        if parent is not None:
            children.setdefault(parent, []).append(execution_id)
    if root not in known:
        return []
    out = [root]
    seen = {root}
    for current in out:  # grows while it is walked
        for child in children.get(current, ()):
            if child not in seen:
                seen.add(child)
                out.append(child)
    return out
