"""What each task attempt printed, read from an execution's event log (`noetl exec logs`,
`GET /api/executions/{id}/logs`, the console's step page).

A task's output (`stdout` of its `tool.processed` event: what user code printed and
logged, and the tool's own log lines, bounded and masked by the worker; see
noetl.worker.output) belongs to the attempt that event ends. The attempts are numbered
as the step's page numbers them (noetl.runtime.step_view), so the fold reads the log from
its start; `after_seq` only leaves out the entries a caller has already seen.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from noetl.core import Event, EventType
from noetl.runtime.step_view import AttemptFold

__all__ = ["LogEntry", "log_entries"]


@dataclass(frozen=True, slots=True)
class LogEntry:
    """The output of one attempt of one task."""

    seq: int  # of the event that recorded it
    ts: float
    step: str
    task_id: str
    index: int | None
    attempt: int
    run: int
    ok: bool
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "ts": self.ts,
            "step": self.step,
            "task_id": self.task_id,
            "index": self.index,
            "attempt": self.attempt,
            "run": self.run,
            "ok": self.ok,
            "text": self.text,
        }


def log_entries(
    events: Iterable[Event],
    *,
    step: str | None = None,
    after_seq: int = 0,
    limit: int | None = None,
) -> list[LogEntry]:
    """The output of every attempt that printed something, in the order the attempts
    ended; only `step`'s with `step`, only those recorded after `after_seq`, at most
    `limit`."""
    folds: dict[str, AttemptFold] = {}
    found: list[LogEntry] = []
    for event in events:
        if event.type == EventType.TASK_CANCELED:
            for fold in folds.values():
                fold.feed(event)
            continue
        name = event.step
        if name is None or (step is not None and name != step):
            continue
        if name not in folds:
            folds[name] = AttemptFold(name)
        fold = folds[name]
        fold.feed(event)
        if event.type != EventType.TOOL_PROCESSED or event.seq <= after_seq:
            continue
        payload = event.payload
        text, task_id = payload.get("stdout"), payload.get("task_id")
        if not isinstance(text, str) or not text or not isinstance(task_id, str):
            continue
        attempt = fold.current.get(task_id)
        found.append(
            LogEntry(
                seq=event.seq,
                ts=event.ts,
                step=name,
                task_id=task_id,
                index=attempt.index if attempt is not None else None,
                attempt=attempt.attempt if attempt is not None else 1,
                run=attempt.run if attempt is not None else 1,
                ok=bool(payload.get("ok")),
                text=text,
            )
        )
        if limit is not None and len(found) >= limit:
            break
    return found
