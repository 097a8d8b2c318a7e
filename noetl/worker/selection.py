"""`result.select`: keep the whole result in the result store, report the selection.

A step whose result is large but whose later steps read a few fields of it says so with
`result.select: [fields]` (upstream's `output.output_select`). After the tool and its sinks
(which write the whole result), the worker keeps the whole result in the result store
(`store.results`) and reports only the selected fields of it, with:

* `_ref`: the reference the `artifact` tool reads the whole result back by;
* `_store`: where it is kept (`"db"`: the execution's own database);
* `_bytes`: the size of its JSON text.

The event log, the context and every later task then carry the selection, not the
result. A field the result does not have is left out (reading it is an undefined name);
a result that is not a mapping keeps only the three keys. A failed outcome is reported as
it is. If the result store cannot be written, the task fails retryably: nothing was
reported, so the next attempt runs the tool again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from noetl.core import Outcome, Task
from noetl.store.ports import ResultStore

__all__ = ["select_result"]


def select_result(outcome: Outcome, task: Task, results: ResultStore | None) -> Outcome:
    """The outcome as a task with `select` reports it (see the module's docstring)."""
    if not task.select or not outcome.ok:
        return outcome
    if results is None:
        return _failed(outcome, "result.select: this process has no result store", False)
    this = outcome.this
    try:
        stored = results.put(task.execution_id, task.step, this)
    except Exception as exc:  # the database: the task can run again
        return _failed(outcome, f"result.select: keeping the result failed: {exc}", True)
    kept: dict[str, Any] = {}
    if isinstance(this, Mapping):
        kept = {name: this[name] for name in task.select if name in this}
    kept.update({"_ref": stored.ref, "_store": "db", "_bytes": stored.bytes})
    return dataclasses.replace(outcome, this=kept)


def _failed(outcome: Outcome, error: str, retryable: bool) -> Outcome:
    return Outcome(
        task_id=outcome.task_id,
        ok=False,
        error=error,
        error_type="StoreUnavailableError" if retryable else "FatalError",
        retryable=retryable,
        stdout=outcome.stdout,
        duration_ms=outcome.duration_ms,
    )
