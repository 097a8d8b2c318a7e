"""What every adapter shares: JSON encoding, append validation, row <-> record mapping.

Adapters store JSON as text produced by `dumps`, so the memory store behaves like the
databases (tuples come back as lists, non-JSON values fail at commit, callers cannot mutate
stored state through returned objects).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl.engine.types import Event, ExecutionStatus
from noetl.store.base import Append, ExecutionRecord

# Column order of `execution` as the adapters read and write it.
EXECUTION_COLUMNS = (
    "execution_id",
    "playbook_name",
    "playbook_path",
    "playbook_text",
    "workload",
    "status",
    "context",
    "parent_execution_id",
    "last_seq",
    "created_at",
    "updated_at",
    "finished_at",
)

EventRow = tuple[str, int, str, float, str | None, str]
StepRow = tuple[str, str, str, float]


def dumps(value: Any) -> str:
    """Compact JSON text, the one encoding of every JSON column."""
    return json.dumps(value, separators=(",", ":"))


def loads(text: str) -> Any:
    return json.loads(text)


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


def prepare(append: Append) -> PreparedAppend:
    """Check that the events continue `expected_seq` without gaps and encode them.

    Raises ValueError for a gap, a repeated or out-of-order seq, or an event of another
    execution: those are bugs in the caller, not races.
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
            (execution_id, event.seq, event.type, event.ts, event.step, dumps(event.payload))
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
        steps=[(execution_id, step, dumps(value), now) for step, value in append.steps.items()],
        context=None if append.context is None else dumps(append.context),
        now=now,
    )


def event_from_row(execution_id: str, row: tuple[Any, ...]) -> Event:
    """Build an Event from (seq, type, ts, step, payload_json)."""
    seq, type_, ts, step, payload = row
    return Event(
        seq=seq, type=type_, execution_id=execution_id, ts=ts, step=step, payload=loads(payload)
    )


def record_to_row(record: ExecutionRecord) -> dict[str, Any]:
    """The `execution` columns for a new record (JSON columns encoded)."""
    if record.last_seq != 0:
        raise ValueError(
            f"a new execution starts at last_seq 0, got {record.last_seq} for {record.execution_id}"
        )
    return {
        "execution_id": record.execution_id,
        "playbook_name": record.playbook_name,
        "playbook_path": record.playbook_path,
        "playbook_text": record.playbook_text,
        "workload": dumps(record.workload),
        "status": ExecutionStatus(record.status).value,
        "context": dumps(record.context),
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
        workload=loads(row["workload"]),
        status=ExecutionStatus(row["status"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        finished_at=row["finished_at"],
        parent_execution_id=row["parent_execution_id"],
        last_seq=row["last_seq"],
        context=loads(row["context"]),
    )


def check_page(limit: int | None, offset: int = 0) -> None:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
