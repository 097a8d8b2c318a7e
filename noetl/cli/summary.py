"""What `noetl run` prints when an execution ends: a summary that answers.

* the status, the duration and the steps by status;
* each failed step's error, with the line of the playbook where the step is;
* a failed loop's failed items: index, element, error and the dead-letter id a replay
  takes (`noetl dlq replay <id>`), the first `MAX_ITEMS` of them;
* the attempts and retries each step took, when it took more than one attempt;
* each saved value (`result.as`, `collect`), on one line, cut at `VALUE_WIDTH`
  characters, with the keys that name secrets masked (noetl.redaction) and every secret
  value the run handed out masked too.

The facts come from the execution's event log (`gather`); printing never fails the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.text import Text

from noetl.core import Event, EventType
from noetl.decision.records import RunResult
from noetl.dsl.model import Playbook
from noetl.dsl.source import Source
from noetl.dsl.yaml_tree import line_at
from noetl.redaction import SECRET_VALUES, redact

__all__ = [
    "MAX_ITEMS",
    "VALUE_WIDTH",
    "FailedItem",
    "StepFacts",
    "gather",
    "print_summary",
    "step_lines",
]

VALUE_WIDTH = 100  # characters of a saved value or an error shown
MAX_ITEMS = 10  # failed items listed per loop


@dataclass(frozen=True, slots=True)
class FailedItem:
    """One loop item that failed for good."""

    index: int
    element: Any
    error: str
    message_id: str | None


@dataclass(slots=True)
class StepFacts:
    """What the event log says of one step."""

    attempts: int = 0  # tool runs reported (each try of each task)
    retries: int = 0  # retries started
    failed_items: list[FailedItem] = field(default_factory=list)
    line: int | None = None


def step_lines(source: Source | None, playbook: Playbook) -> dict[str, int]:
    """The line of each step in the playbook's file (none known: left out)."""
    if source is None:
        return {}
    lines: dict[str, int] = {}
    for index, step in enumerate(playbook.workflow):
        line = line_at(source.tree, ("workflow", index))
        if line:
            lines[step.step] = line
    return lines


def gather(events: Iterable[Event], lines: Mapping[str, int] | None = None) -> dict[str, StepFacts]:
    """The facts of each step of an execution, from its events; `lines`: the line of each
    step in the playbook."""
    facts: dict[str, StepFacts] = {}
    elements: dict[tuple[str, int], Any] = {}
    dead: dict[tuple[str, int], str] = {}

    def of(step: str) -> StepFacts:
        if step not in facts:
            facts[step] = StepFacts(line=(lines or {}).get(step))
        return facts[step]

    for event in events:
        step, payload = event.step, event.payload
        if step is None:
            continue
        kind = event.type
        if kind == EventType.TOOL_PROCESSED:
            of(step).attempts += 1
        elif kind == EventType.RETRY_STARTED:
            of(step).retries += 1
        elif kind == EventType.LOOP_ITERATION_STARTED and isinstance(payload.get("index"), int):
            elements[(step, payload["index"])] = _element(payload)
        elif kind == EventType.TASK_DEAD_LETTERED and isinstance(payload.get("index"), int):
            dead[(step, payload["index"])] = str(payload.get("task_id"))
        elif kind == EventType.LOOP_ITERATION_FINISHED and payload.get("ok") is True:
            # only failed items are shown: keep memory flat over a long loop
            elements.pop((step, int(payload.get("index") or 0)), None)
        elif (
            kind == EventType.LOOP_ITERATION_FINISHED
            and payload.get("ok") is False
            and isinstance(payload.get("index"), int)
        ):
            index = payload["index"]
            of(step).failed_items.append(
                FailedItem(
                    index,
                    elements.get((step, index)),
                    str(payload.get("error") or "failed"),
                    dead.get((step, index)),
                )
            )
    return facts


def _element(payload: Mapping[str, Any]) -> Any:
    task = payload.get("task")
    context = task.get("context") if isinstance(task, Mapping) else None
    loop = context.get("_loop") if isinstance(context, Mapping) else None
    return loop.get("item") if isinstance(loop, Mapping) else None


def print_summary(
    console: Console, result: RunResult, facts: Mapping[str, StepFacts] | None = None
) -> None:
    """The final summary (see the module)."""
    facts = facts or {}
    ok = result.status.value == "ok"
    counts: dict[str, int] = {}
    for step in result.steps.values():
        counts[step["status"]] = counts.get(step["status"], 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    console.print(
        Text(
            f"execution {result.execution_id} finished: {result.status.value}",
            style=f"bold {'green' if ok else 'red'}",
        ),
        Text(f" in {result.duration_s:.2f}s ({parts})"),
    )
    for name, step in result.steps.items():
        fact = facts.get(name, StepFacts())
        if step.get("error"):
            where = f" (line {fact.line})" if fact.line else ""
            console.print(Text(f"  {name}{where}: {_cut(_first_line(step['error']))}", "red"))
            _print_items(console, fact.failed_items)
        if fact.retries:
            console.print(
                Text(f"  {name}: {fact.retries} retries ({fact.attempts} attempts)", "dim")
            )
    if result.error:
        console.print(Text(f"  {result.error}", style="red"))
    for name, value in sorted(result.context.items()):
        console.print(Text(f"  {name} = ", style="dim") + Text(_shown(name, value)))


def _print_items(console: Console, items: list[FailedItem]) -> None:
    for item in items[:MAX_ITEMS]:
        dlq = f"  [dlq {item.message_id}]" if item.message_id else ""
        element = _cut(_json(SECRET_VALUES.mask(redact(item.element))), 40)
        error = _cut(_first_line(item.error), 60)
        console.print(Text(f"    item {item.index} ({element}): {error}{dlq}", "red"))
    if len(items) > MAX_ITEMS:
        console.print(Text(f"    ... {len(items) - MAX_ITEMS} more failed items", "red"))


def _shown(name: str, value: Any) -> str:
    masked = SECRET_VALUES.mask(redact({name: value})[name])
    return _cut(_json(masked))


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def _cut(text: str, width: int = VALUE_WIDTH) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
