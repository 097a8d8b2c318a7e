"""The Store port: what the runtime needs from persistence, independent of the database.

Every adapter (memory, SQLite, PostgreSQL) passes the same contract suite
(`tests/contract`). Writes for one decision happen in one transaction: events are appended
with an expected sequence number (optimistic concurrency; the per-execution sequence stays
gapless), and the projections (execution row, step states) are updated together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from noetl.engine.types import Event, ExecutionStatus
from noetl.errors import NoetlError


class ConcurrencyError(NoetlError):
    """Another writer appended to the execution first (expected sequence did not match)."""


class NotFoundError(NoetlError):
    """No such execution."""


class StoreUnavailableError(NoetlError):
    """The database cannot be opened or used (missing directory, no permission, locked).

    The message names the database and what to do about it. A locked or busy database is
    transient (`retryable`); a path that cannot be opened is not.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class ExecutionRecord:
    """One row of `execution`: what ran, its input, status and timestamps (epoch seconds)."""

    execution_id: str
    playbook_name: str
    playbook_path: str | None
    playbook_text: str
    workload: dict[str, Any]
    status: ExecutionStatus = ExecutionStatus.RUNNING
    created_at: float = 0.0
    updated_at: float = 0.0
    finished_at: float | None = None
    parent_execution_id: str | None = None
    last_seq: int = 0
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Append:
    """Events for one execution plus the projection changes they cause.

    `expected_seq` is the sequence number of the last event already stored (0 for none);
    `events` must continue it without gaps. `steps` maps step name -> its status dict
    (replacing the stored one); `context` replaces the stored context when given.
    """

    execution_id: str
    expected_seq: int
    events: Sequence[Event]
    status: ExecutionStatus | None = None
    steps: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    context: dict[str, Any] | None = None
    now: float = 0.0


class Store(Protocol):
    """Persistence of executions and their event logs."""

    def create_execution(self, record: ExecutionRecord) -> None:
        """Insert a new execution row as given (`record.last_seq` must be 0).

        ConcurrencyError if an execution with that id already exists."""

    def commit(self, appends: Sequence[Append]) -> None:
        """Apply every append in ONE transaction; ConcurrencyError (and nothing written)
        if any expected_seq does not match the stored last sequence, NotFoundError if an
        execution does not exist, ValueError if events do not continue expected_seq
        gaplessly. A given status sets `finished_at` to `now` when terminal, else clears it.
        """

    def load_events(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events of an execution in sequence order, after `after_seq`; NotFoundError if
        the execution does not exist."""

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """The execution row, or None."""

    def list_executions(
        self, *, status: ExecutionStatus | None = None, limit: int = 50, offset: int = 0
    ) -> list[ExecutionRecord]:
        """Newest first (by created_at, then by insertion)."""

    def get_steps(self, execution_id: str) -> dict[str, dict[str, Any]]:
        """The step_state projection: step name -> status dict; NotFoundError if the
        execution does not exist."""

    def close(self) -> None: ...
