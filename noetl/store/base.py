"""The Store port: what the runtime needs from persistence, independent of the database.

Every adapter (memory, SQLite, PostgreSQL) passes the same contract suite
(`tests/contract`). Writes for one decision happen in one transaction: events are appended
with an expected sequence number (optimistic concurrency; the per-execution sequence stays
gapless), and the projections (execution row, step states) are updated together.

The values live in `noetl.store.records`, the protocols in `noetl.store.ports` (a role
port per kind of caller, `Store` their union); this module names them all in one place.
"""

from __future__ import annotations

from noetl.core import (
    ConcurrencyError,
    HistoryPrunedError,
    NotFoundError,
    StalePlaybookError,
    StoreUnavailableError,
)
from noetl.store.ports import (
    AdminPort,
    CatalogPort,
    DeadLetterPort,
    ExecutionPort,
    InboxPort,
    InputHolder,
    LeasePort,
    RetentionPort,
    ScheduleStore,
    Store,
    WaitPort,
    WorkerRegistryPort,
)
from noetl.store.records import (
    Append,
    Clock,
    Completed,
    Completion,
    DeadLetter,
    DeadLetterStatus,
    Enqueue,
    ExecutionRecord,
    Heartbeat,
    Input,
    InputKind,
    Lease,
    NewExecution,
    PartitionReport,
    PlaybookRecord,
    PruneReport,
    Requeue,
    ScheduleRecord,
    StoreStats,
    TaskStatus,
    TickRecord,
    TickStatus,
    Timer,
    WorkerRecord,
)

__all__ = [
    "AdminPort",
    "Append",
    "CatalogPort",
    "Clock",
    "Completed",
    "Completion",
    "ConcurrencyError",
    "DeadLetter",
    "DeadLetterPort",
    "DeadLetterStatus",
    "Enqueue",
    "ExecutionPort",
    "ExecutionRecord",
    "Heartbeat",
    "HistoryPrunedError",
    "InboxPort",
    "Input",
    "InputHolder",
    "InputKind",
    "Lease",
    "LeasePort",
    "NewExecution",
    "NotFoundError",
    "PartitionReport",
    "PlaybookRecord",
    "PruneReport",
    "Requeue",
    "RetentionPort",
    "ScheduleRecord",
    "ScheduleStore",
    "StalePlaybookError",
    "Store",
    "StoreStats",
    "StoreUnavailableError",
    "TaskStatus",
    "TickRecord",
    "TickStatus",
    "Timer",
    "WaitPort",
    "WorkerRecord",
    "WorkerRegistryPort",
]
