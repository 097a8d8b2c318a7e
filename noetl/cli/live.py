"""The live terminal view of `noetl run`: steps, their state, loop progress, elapsed time."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from noetl.cli import summary
from noetl.core import StepStatus
from noetl.decision.records import RunResult
from noetl.engine import ExecutionState

# How a step status is shown (also by `noetl exec`).
STEP_STYLE = {
    StepStatus.PENDING: "dim",
    StepStatus.PARKED: "yellow",
    StepStatus.RUNNING: "cyan",
    StepStatus.OK: "green",
    StepStatus.FAILED: "red",
    StepStatus.SKIPPED: "dim",
    StepStatus.CANCELED: "magenta",
}


def _table(state: ExecutionState, started: float) -> Group:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("step")
    table.add_column("state")
    table.add_column("progress", width=34)
    for name, run in state.steps.items():
        progress: Any = ""
        if run.is_loop and run.total:
            failed = f" ({run.failed} failed)" if run.failed else ""
            label = Text(f" {run.completed}/{run.total}{failed}")
            progress = Text.assemble(*bar_text(run.completed, run.total), label)
        table.add_row(name, Text(run.status.value, style=STEP_STYLE[run.status]), progress)
    elapsed = time.monotonic() - started
    header = Text(
        f"execution {state.execution_id}  {state.status.value}  {elapsed:6.1f}s", style="bold"
    )
    return Group(header, table)


def bar_text(done: int, total: int, width: int = 20) -> tuple[Text, ...]:
    """A progress bar of `width` cells, `done` of `total` filled."""
    filled = int(width * done / total) if total else width
    return (Text("█" * filled, style="green"), Text("░" * (width - filled), style="dim"))


class LiveView:
    """Refreshes a table in place while an execution runs (only on a terminal)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self.live = Live(console=console, refresh_per_second=8, transient=False)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def update(self, states: dict[str, ExecutionState]) -> None:
        for state in states.values():
            self.live.update(_table(state, self.started))


def print_summary(console: Console, result: RunResult) -> None:
    """The final summary (noetl.cli.summary), without the facts of the event log."""
    summary.print_summary(console, result)
