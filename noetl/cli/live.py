"""The live terminal view of `noetl run`: steps, their state, loop progress, elapsed time.

`STEP_STYLE` and `bar_text` are re-exported for `noetl exec` (noetl.cli.frame)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live

from noetl.cli import summary
from noetl.cli.frame import STEP_STYLE, Rates, bar_text, of_state, render
from noetl.decision.records import RunResult
from noetl.engine import ExecutionState

__all__ = ["STEP_STYLE", "LiveView", "bar_text", "print_summary"]


class LiveView:
    """Refreshes a frame (noetl.cli.frame) in place while an execution runs (only on a
    terminal); the last frame stays on the screen."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self.rates = Rates()
        self.live = Live(console=console, refresh_per_second=8, transient=False)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def update(self, states: dict[str, ExecutionState]) -> None:
        for state in states.values():
            frame = of_state(state, time.monotonic() - self.started)
            self.live.update(render(frame, self.console.width, self.rates))


def print_summary(console: Console, result: RunResult) -> None:
    """The final summary (noetl.cli.summary), without the facts of the event log."""
    summary.print_summary(console, result)
