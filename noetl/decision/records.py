"""What every runtime builds when it starts an execution: its id, its row, its workload,
and the result `noetl run` reports."""

from __future__ import annotations

import itertools
import os
import secrets
from dataclasses import dataclass, field
from typing import Any

from noetl.core import ExecutionStatus
from noetl.dsl.model import Playbook
from noetl.store.base import ExecutionRecord

__all__ = ["RunResult", "merge_workload", "new_execution_id", "new_record"]


# The low six digits: a counter from a random start, per process. Two ids this process
# makes differ there unless a million are made in one millisecond, so a burst of starts
# never meets itself. Six random digits could: starts made in the same millisecond drew
# from a million values, and one of a burst of 6,000 API starts met an id taken (HTTP
# 409). Ids of other processes differ by their random start.
_LOW = itertools.count(secrets.randbelow(1_000_000))


def _reseed() -> None:
    global _LOW  # noqa: PLW0603 - a forked child counts from a start of its own
    _LOW = itertools.count(secrets.randbelow(1_000_000))


os.register_at_fork(after_in_child=_reseed)


def new_execution_id(now: float) -> str:
    """A time-ordered numeric id: milliseconds, then 6 digits that differ between this
    process's ids."""
    return f"{int(now * 1000)}{next(_LOW) % 1_000_000:06d}"


@dataclass(frozen=True)
class RunResult:
    """The outcome of an execution, as `noetl run --json` prints it."""

    execution_id: str
    status: ExecutionStatus
    steps: dict[str, dict[str, Any]]
    context: dict[str, Any]
    started_at: float
    finished_at: float
    error: str | None = None
    # Upstream NoETL's execution variables (only an upstream playbook has any).
    ctx: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return self.finished_at - self.started_at

    @property
    def ok(self) -> bool:
        """Whether the execution ended ok."""
        return self.status is ExecutionStatus.OK

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "execution_id": self.execution_id,
            "status": self.status.value,
            "steps": self.steps,
            "context": self.context,
            "duration_s": round(self.duration_s, 6),
        }
        if self.error:
            out["error"] = self.error
        if self.ctx:
            out["ctx"] = self.ctx
        return out


def new_record(
    playbook: Playbook,
    execution_id: str,
    *,
    text: str,
    path: str | None,
    now: float,
    parent_execution_id: str | None,
) -> ExecutionRecord:
    """The `execution` row of a new execution of `playbook` (its workload is recorded by
    its first event, `workflow.started`, and nowhere else)."""
    return ExecutionRecord(
        execution_id=execution_id,
        playbook_name=playbook.metadata.name,
        playbook_path=path or playbook.metadata.path,
        playbook_text=text,
        created_at=now,
        updated_at=now,
        parent_execution_id=parent_execution_id,
    )


def merge_workload(defaults: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The playbook's workload with the request's values merged over it (deep for maps)."""
    merged = dict(defaults)
    for key, value in overrides.items():
        base = merged.get(key)
        if isinstance(base, dict) and isinstance(value, dict):
            merged[key] = merge_workload(base, value)
        else:
            merged[key] = value
    return merged
