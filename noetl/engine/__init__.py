"""The pure engine: events in, new events and commands out. No I/O.

The values it takes and returns (events, tasks, outcomes, commands) are `noetl.core`'s.
Inside, a decision runs in a `Turn` (`noetl.engine.turn`), which `Engine.decide` hands to
the handler of the input's type (`noetl.engine.engine.HANDLERS`).
"""

from noetl.engine.engine import Engine
from noetl.engine.options import EngineOptions
from noetl.engine.retry import RetryDefaults
from noetl.engine.state import ExecutionState, StepRun, apply, fold

__all__ = [
    "Engine",
    "EngineOptions",
    "ExecutionState",
    "RetryDefaults",
    "StepRun",
    "apply",
    "fold",
]
