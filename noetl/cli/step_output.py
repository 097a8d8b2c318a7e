"""What steps print, on the terminal of `noetl run` as it comes.

Each line is prefixed with the step (and the loop item, and the attempt after the
first): `[load#3 attempt 2] fetched 120 rows`. Lines go to standard error, above the live
view when there is one (rich prints above its live region); `--quiet` prints none. With
`--log-format json` each line is a JSON log record instead (`JsonOutputPrinter`), so
standard error stays one JSON object per line. The same lines are kept in the
execution's events (`noetl exec logs`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import IO

from rich.console import Console
from rich.text import Text

from noetl.core import Task

__all__ = ["JsonOutputPrinter", "OutputPrinter", "label"]

LOGGER = "noetl.step.output"  # the `logger` of the JSON records

MAX_LINE = 2000  # characters of one line printed (the events keep it whole)


def label(step: str | None, index: int | None, attempt: int) -> str:
    """`[step]`, `[step#index]`, with ` attempt N` after the first attempt."""
    name = step or "?"
    if index is not None:
        name += f"#{index}"
    if attempt > 1:
        name += f" attempt {attempt}"
    return f"[{name}]"


class OutputPrinter:
    """An output listener (noetl.worker.output) that prints on `console`."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, task: Task, text: str) -> None:
        prefix = label(task.step, task.index, task.attempt)
        for whole in text.splitlines():
            line = whole if len(whole) <= MAX_LINE else whole[:MAX_LINE] + "…"
            out = Text.assemble((prefix + " ", "dim"), line.replace("\0", "\\0"))
            self.console.print(out, soft_wrap=True, highlight=False)


class JsonOutputPrinter:
    """An output listener writing one JSON log record per line (`--log-format json`)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def __call__(self, task: Task, text: str) -> None:
        stream = self.stream or sys.stderr
        now = time.time()
        stamp = (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"
        )
        records = []
        for line in text.splitlines():
            record = {
                "ts": stamp,
                "level": "INFO",
                "logger": LOGGER,
                "msg": line[:MAX_LINE],
                "execution_id": task.execution_id,
                "step_id": task.step,
                "attempt": task.attempt,
            }
            if task.index is not None:
                record["index"] = task.index
            records.append(json.dumps(record, ensure_ascii=False) + "\n")
        with self.lock:
            stream.write("".join(records))
            stream.flush()
