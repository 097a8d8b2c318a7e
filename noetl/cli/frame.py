"""One frame of the live view of an execution, for `noetl run` and `noetl exec status
--watch` alike: a header and a row per step, each row one line whatever the terminal's
width (names and counts are cut, never wrapped), a loop's progress bar with its counts,
failed items, rate and time left.

A frame is built from the engine's state (`of_state`, in `noetl run`) or from the API's
answer (`of_api`, in `noetl exec status --watch`); the rate of a loop is measured by a
`Rates` the view keeps between frames (items done since it first saw the loop, over the
time since), so both sources give the same figures.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from noetl.core import StepStatus

__all__ = ["STEP_STYLE", "Frame", "Rates", "Row", "bar_text", "of_api", "of_state", "render"]

# How a step status is shown.
STEP_STYLE = {
    StepStatus.PENDING: "dim",
    StepStatus.PARKED: "yellow",
    StepStatus.RUNNING: "cyan",
    StepStatus.OK: "green",
    StepStatus.FAILED: "red",
    StepStatus.SKIPPED: "dim",
    StepStatus.CANCELED: "magenta",
}


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    status: str
    total: int = 0
    completed: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class Frame:
    execution_id: str
    status: str
    elapsed: float
    rows: tuple[Row, ...]


class Rates:
    """Items per second of each loop, measured across frames."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._first: dict[str, tuple[float, int]] = {}

    def of(self, row: Row) -> float | None:
        """The loop's rate since it was first seen; None until it can be told."""
        now = self._clock()
        first = self._first.setdefault(row.name, (now, row.completed))
        seconds, done = now - first[0], row.completed - first[1]
        return done / seconds if seconds >= 0.5 and done > 0 else None


def of_state(state: Any, elapsed: float) -> Frame:
    """A frame of the engine's state (`noetl.engine.ExecutionState`)."""
    rows = tuple(
        Row(name, run.status.value, run.total or 0, run.completed, run.failed)
        if run.is_loop
        else Row(name, run.status.value)
        for name, run in state.steps.items()
    )
    return Frame(state.execution_id, state.status.value, elapsed, rows)


def of_api(data: Mapping[str, Any], elapsed: float | None = None) -> Frame:
    """A frame of the API's answer for an execution (`GET /api/executions/{id}`)."""
    rows = []
    for name, step in (data.get("steps") or {}).items():
        rows.append(
            Row(
                str(name),
                str(step.get("status", "")),
                int(step.get("total") or 0),
                int(step.get("completed") or 0),
                int(step.get("failed") or 0),
            )
        )
    took = float(data.get("duration_s") or 0.0) if elapsed is None else elapsed
    return Frame(str(data.get("execution_id")), str(data.get("status")), took, tuple(rows))


def bar_text(done: int, total: int, width: int = 20) -> tuple[Text, ...]:
    """A progress bar of `width` cells, `done` of `total` filled."""
    filled = min(width, int(width * done / total)) if total else width
    return (Text("█" * filled, style="green"), Text("░" * (width - filled), style="dim"))


def _style(status: str) -> str:
    try:
        return STEP_STYLE[StepStatus(status)]
    except ValueError:  # a status this client does not know (a newer server)
        return ""


def _eta(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _progress(row: Row, rates: Rates | None, bar: int) -> Text:
    if not row.total:
        return Text("")
    parts = [*bar_text(row.completed, row.total, bar), Text(f" {row.completed}/{row.total}")]
    if row.failed:
        parts.append(Text(f" {row.failed} failed", style="red"))
    rate = rates.of(row) if rates is not None and row.status == "running" else None
    if rate:
        left = (row.total - row.completed) / rate
        parts.append(Text(f" {rate:,.1f}/s ETA {_eta(left)}", style="dim"))
    return Text.assemble(*parts)


def render(frame: Frame, width: int = 80, rates: Rates | None = None) -> Group:
    """The frame as a header and a table that fit in `width` columns, one line a row."""
    bar = 10 if width < 100 else 20
    name_width = max(8, min(32, width // 4))
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False, width=width)
    table.add_column("step", no_wrap=True, overflow="ellipsis", max_width=name_width)
    table.add_column("state", no_wrap=True, width=8)
    table.add_column("progress", no_wrap=True, overflow="ellipsis", ratio=1)
    for row in frame.rows:
        table.add_row(
            row.name, Text(row.status, style=_style(row.status)), _progress(row, rates, bar)
        )
    header = Text(
        f"execution {frame.execution_id}  {frame.status}  {frame.elapsed:6.1f}s",
        style="bold",
        no_wrap=True,
        overflow="ellipsis",
    )
    return Group(header, table)
