"""Read-only views of an execution's folded state, for code outside the engine.

Observers (metrics, log events, traces) are told what a decision committed together with
the state that folds it. They read a handful of fields, so they take these protocols
rather than the engine's `ExecutionState`: the engine's state satisfies them structurally,
and the edges of the system keep speaking `noetl.core`, never the engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from noetl.core.types import StepStatus

__all__ = ["ExecutionView", "StepView"]


class StepView(Protocol):
    """One step of an execution as it stands (a loop step's counters included)."""

    @property
    def status(self) -> StepStatus: ...

    @property
    def started_at(self) -> float | None: ...

    @property
    def is_loop(self) -> bool: ...

    @property
    def total(self) -> int | None: ...

    @property
    def completed(self) -> int: ...

    @property
    def succeeded(self) -> int: ...

    @property
    def failed(self) -> int: ...


class ExecutionView(Protocol):
    """An execution as it stands after the events it has folded."""

    @property
    def execution_id(self) -> str: ...

    @property
    def started_at(self) -> float | None: ...

    @property
    def workload(self) -> Mapping[str, Any]: ...

    @property
    def steps(self) -> Mapping[str, StepView]: ...
