"""The shared vocabulary of every layer: events, tasks, outcomes, commands, store errors,
secret markers (`noetl.core.secrets`).

The bottom layer: plain data every other package speaks (the engine decides with it, the
store keeps it, workers and tools run and report it). It imports nothing of NoETL but
`noetl.errors`, so importing it never pulls in the engine, a store adapter or a tool.
"""

from noetl.core.errors import (
    ConcurrencyError,
    HistoryPrunedError,
    NotFoundError,
    StalePlaybookError,
    StoreUnavailableError,
)
from noetl.core.types import (
    CancelTasks,
    Command,
    Decision,
    EnqueueTask,
    Event,
    EventType,
    ExecutionStatus,
    Outcome,
    RequeueTask,
    StartTimer,
    StepStatus,
    Task,
)

__all__ = [
    "CancelTasks",
    "Command",
    "ConcurrencyError",
    "Decision",
    "EnqueueTask",
    "Event",
    "EventType",
    "ExecutionStatus",
    "HistoryPrunedError",
    "NotFoundError",
    "Outcome",
    "RequeueTask",
    "StalePlaybookError",
    "StartTimer",
    "StepStatus",
    "StoreUnavailableError",
    "Task",
]
