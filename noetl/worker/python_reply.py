"""What a python child's reply becomes: a task's `Outcome` (or the failure that stands in
for it), and the request a task is sent as (`noetl.worker.python_pool`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from noetl.core import Outcome, Task
from noetl.worker._pychild import Reply
from noetl.worker.python_child import CallFailure, ChildProcess, Printed

__all__ = ["Ahead", "Early", "elapsed_ms", "failed", "outcome_of", "ran_ms", "request_of"]


class Ahead(NamedTuple):
    """A task's reply from `run_ahead` (or why it has none), how long it ran (ms) and
    what it printed meanwhile."""

    reply: Reply | None
    failure: CallFailure | None
    duration_ms: float
    printed: Printed

    def outcome(self, task: Task, output: Printed) -> Outcome:
        """The task's outcome; its printed lines passed on to the task's output now."""
        for part in self.printed.parts:
            output.add(part)
        if self.failure is not None or self.reply is None:
            failure = self.failure or CallFailure("no reply", "ProcessError")
            return Outcome(
                task_id=task.task_id,
                ok=False,
                error=failure.message,
                error_type=failure.error_type,
                retryable=failure.retryable,
                stdout=self.printed.text(),
                duration_ms=self.duration_ms,
            )
        return outcome_of(task, self.reply, self.duration_ms)


@dataclass(slots=True)
class Early:
    """A task `PythonPool.start_early` sent: its child, when it was sent
    (`time.perf_counter`), by when its reply is due (`time.monotonic`) and its timeout;
    and, once `wait` has read them, its reply and the lines it printed before it."""

    child: ChildProcess
    began: float
    deadline: float
    timeout_ms: int
    printed: Printed | None = None  # made by the first `wait`: most are never waited for
    reply: Reply | None = None

    def wait(self, within_s: float) -> bool:
        """Whether the reply came within `within_s` (kept for the task's `run`); True too
        when there is nothing more to wait for (the child died, the task's time is up):
        its `run` says what became of it at once."""
        if self.reply is None:
            if self.printed is None:
                self.printed = Printed(None)
            try:
                due = min(time.monotonic() + max(within_s, 0.0), self.deadline)
                self.reply = self.child.reply(due, self.printed)
            except (EOFError, OSError):
                return True
        return self.reply is not None or time.monotonic() >= self.deadline


def request_of(task: Task) -> Reply | str:
    """The message for the child, or why the spec cannot be run."""
    spec = task.spec
    code, module = spec.get("code"), spec.get("module")
    name = spec.get("callable") or "main"
    if (code is None) == (module is None):
        return "python tool needs exactly one of spec.code or spec.module"
    if not isinstance(code or module, str) or not isinstance(name, str):
        return "python tool spec.code, spec.module and spec.callable must be strings"
    style = spec.get("style") or "main"
    libs = spec.get("libs") or {}
    if style not in ("main", "toplevel") or not isinstance(libs, dict):
        return "python tool spec.style must be main or toplevel, and spec.libs a map"
    return (code, module, name, task.args, task.context, style, libs)


def elapsed_ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def failed(
    task: Task,
    started: float,
    error: str,
    error_type: str,
    *,
    retryable: bool = False,
    stdout: str = "",
) -> Outcome:
    return Outcome(
        task_id=task.task_id,
        ok=False,
        error=error,
        error_type=error_type,
        retryable=retryable,
        stdout=stdout,
        duration_ms=elapsed_ms(started),
    )


def ran_ms(reply: Reply) -> float:
    """How long the call ran in its child (the child's own count, the reply's last item)."""
    return float(reply[-1])


def outcome_of(task: Task, reply: Reply, duration_ms: float) -> Outcome:
    """A reply as an outcome: (True, result as JSON text, printed, ms) or (False, error,
    error type, retryable, printed, ms)."""
    if reply[0]:
        text, stdout = reply[1], reply[2]
        this: Any = json.loads(text)
        return Outcome(
            task_id=task.task_id,
            ok=True,
            this=this,
            stdout=stdout,
            duration_ms=duration_ms,
        )
    error, error_type, retryable, stdout = reply[1:5]
    return Outcome(
        task_id=task.task_id,
        ok=False,
        error=error,
        error_type=error_type,
        retryable=retryable,
        stdout=stdout,
        duration_ms=duration_ms,
    )
