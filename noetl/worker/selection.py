"""Results kept outside the event log: `result.select`, and the spill of a large result.

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

A step without `select` whose result is over the inline limit (`worker.result_inline_bytes`
of JSON) is **spilled** the same way, so that events stay small whatever a tool returns:
the whole result goes to the result store and the task reports an envelope, the
top-level entries of a mapping result that are small (`FIELD_BYTES` of JSON each, at most
`ENVELOPE_BYTES` in all, in order: `status`, `count`, small `headers` stay readable), the
three keys above, `_spilled: true`, and for a list its length as `_count`. A task with
`select` is never spilled (its selection is already small).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from noetl.core import Outcome, Task
from noetl.store.ports import ResultStore

__all__ = [
    "DEFAULT_INLINE_BYTES",
    "ENVELOPE_BYTES",
    "FIELD_BYTES",
    "json_size",
    "select_result",
    "spill_result",
]

# A result's JSON over this many bytes is spilled, unless the registry is given another.
DEFAULT_INLINE_BYTES = 256 * 1024
# An entry of a spilled mapping is kept in its envelope when its value's JSON is at most
# this; the kept entries take at most ENVELOPE_BYTES in all.
FIELD_BYTES = 1024
ENVELOPE_BYTES = 16 * 1024
# The longest string whose JSON is surely within any inline limit: a character takes at
# most 6 bytes of ASCII JSON (`\uXXXX`).
_ESCAPED = 6
_SMALL_SCALARS = (int, float, bool, type(None))
# Compact ASCII JSON, as the stores write it; one encoder, built once (the hot path
# measures every container result).
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


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


def spill_result(outcome: Outcome, task: Task, results: ResultStore, inline_bytes: int) -> Outcome:
    """The outcome of a task without `select` as it is reported: as it is when it failed
    or its result's JSON is at most `inline_bytes`, else the envelope of its spilled
    result (see the module's docstring)."""
    if not outcome.ok:
        return outcome
    this = outcome.this
    if type(this) in _SMALL_SCALARS:  # the common case first: nothing to measure
        return outcome
    if type(this) is str and len(this) * _ESCAPED + 2 <= inline_bytes:
        return outcome
    size = json_size(this)
    if size is None or size <= inline_bytes:
        return outcome
    try:
        stored = results.put(task.execution_id, task.step, this)
    except Exception as exc:  # the database: the task can run again
        error = f"keeping a large result ({size} bytes) in the result store failed: {exc}"
        return _failed(outcome, error, True)
    return dataclasses.replace(outcome, this=envelope(this, stored.ref, stored.bytes))


def envelope(this: Any, ref: str, size: int) -> dict[str, Any]:
    """What a spilled result `this` is reported as (see the module's docstring)."""
    kept: dict[str, Any] = {}
    if isinstance(this, Mapping):
        room = ENVELOPE_BYTES
        for key, value in this.items():
            entry = _entry_size(key, value)
            if entry is not None and entry <= room:
                kept[key] = value
                room -= entry
    kept.update({"_ref": ref, "_store": "db", "_bytes": size, "_spilled": True})
    if isinstance(this, list | tuple):
        kept["_count"] = len(this)
    return kept


def json_size(value: Any) -> int | None:
    """The size of `value`'s compact JSON text (as the stores write it), or None when it
    is not JSON (left for the stores to refuse)."""
    try:
        # ASCII (non-ASCII characters escaped): its length is its size in bytes.
        return len(_ENCODE(value))
    except (TypeError, ValueError):
        return None


def _entry_size(key: Any, value: Any) -> int | None:
    """The JSON size of `"key":value,` when the value's own is at most FIELD_BYTES, else
    None. A container of more members than FIELD_BYTES / 2 is over it without measuring
    (each member takes at least a byte and a separator)."""
    if isinstance(value, Mapping | list | tuple) and len(value) > FIELD_BYTES // 2:
        return None
    if type(value) is str and len(value) > FIELD_BYTES:
        return None
    size = json_size(value)
    if size is None or size > FIELD_BYTES:
        return None
    return size + len(json.dumps(str(key))) + 2


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
