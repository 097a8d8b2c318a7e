"""The `artifact` tool: read back a whole result kept in the result store.

A step with `result.select` (upstream's `output_select`) keeps only the selected fields
in its context, with `_ref`, the reference of the whole result in the result store
(`store.results`); so does a step whose result was too large to report (spilled, its
envelope's `_ref`). `kind: artifact` with `action: get` (the default) and the reference
(`ref:`, or `result_ref` / `ref` in its arguments, upstream's `input:`) gives that whole
result as its own: `{{ <step>.items }}` then reads what the selection left out.

A reference is a capability: whoever holds one reads the result (references are 128 random
bits, never listed by the API). An unknown reference fails the task, not retried.
"""

from __future__ import annotations

from typing import Any

from noetl.core import Outcome, Task
from noetl.errors import FatalError
from noetl.store.ports import ResultStore
from noetl.tools._outcome import outcome_of

__all__ = ["ArtifactTool"]


class ArtifactTool:
    """`kind: artifact`: results kept outside the event log, read by reference."""

    kind = "artifact"
    uses_credentials = False
    # Its result is the whole result a step asked for: never spilled again.
    spills_result = False

    def __init__(self, results: ResultStore) -> None:
        self.results = results

    def run(self, task: Task) -> Outcome:
        return outcome_of(task, self._get)

    def _get(self, task: Task) -> Any:
        action = task.spec.get("action", "get")
        if action != "get":
            raise FatalError(f"artifact tool: action {action!r} is not supported (only 'get')")
        ref = _reference(task)
        stored = self.results.get(ref)
        if stored is None:
            raise FatalError(
                f"artifact tool: no result is kept under the reference {ref[:80]!r} (a "
                "reference comes from a step with result.select or a spilled result, as "
                "its `_ref`)"
            )
        return stored.value


def _reference(task: Task) -> str:
    for source, key in ((task.spec, "ref"), (task.args, "result_ref"), (task.args, "ref")):
        value = source.get(key)
        if isinstance(value, dict):  # a whole selection given: its `_ref`
            value = value.get("_ref")
        if isinstance(value, str) and value:
            return value
    raise FatalError(
        "artifact tool: no reference given (set `ref: '{{ <step>._ref }}'`, or "
        "`result_ref` in its arguments)"
    )
