"""The Outcome of a tool call: a result, or the NoetlError it raised, timed."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from noetl.core import Outcome, Task
from noetl.errors import NoetlError


def outcome_of(task: Task, call: Callable[[Task], Any]) -> Outcome:
    """Run `call(task)`: its value is `this`; a NoetlError becomes a failed outcome that
    keeps the error's message, type and retryability. Other exceptions propagate (the
    registry reports them as tool bugs)."""
    started = time.perf_counter()
    try:
        this = call(task)
    except NoetlError as exc:
        return Outcome(
            task_id=task.task_id,
            ok=False,
            error=str(exc),
            error_type=type(exc).__name__,
            retryable=exc.retryable,
            duration_ms=(time.perf_counter() - started) * 1000,
        )
    return Outcome(
        task_id=task.task_id,
        ok=True,
        this=this,
        duration_ms=(time.perf_counter() - started) * 1000,
    )
