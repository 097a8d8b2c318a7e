"""The pure engine: events in, new events and commands out. No I/O."""

from noetl.engine.engine import Engine
from noetl.engine.options import EngineOptions
from noetl.engine.retry import RetryDefaults
from noetl.engine.state import ExecutionState, StepRun, apply, fold
from noetl.engine.types import (
    CancelTasks,
    Decision,
    EnqueueTask,
    Event,
    EventType,
    ExecutionStatus,
    Outcome,
    StepStatus,
    Task,
)

__all__ = [
    "CancelTasks",
    "Decision",
    "Engine",
    "EngineOptions",
    "EnqueueTask",
    "Event",
    "EventType",
    "ExecutionState",
    "ExecutionStatus",
    "Outcome",
    "RetryDefaults",
    "StepRun",
    "StepStatus",
    "Task",
    "apply",
    "fold",
]
