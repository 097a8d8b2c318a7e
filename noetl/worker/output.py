"""What a task prints and logs while it runs: captured per attempt, masked, streamed.

Each task attempt has a `TaskOutput` while its chain runs (the `CaptureOutput`
middleware makes it current for the thread; `current_output()`). Two things write to it:

- the python tool's child process sends each line its user code prints (stdout, stderr
  and log records, see `noetl.worker._pychild`) as it is written; the pool passes the
  lines on with `TaskOutput.live` (they are in the outcome's `stdout` already, whole);
- NoETL's own tools and sinks log through the `noetl.tools`, `noetl.sinks` and
  `noetl.worker` loggers: a record written in the task's thread while its level is
  enabled is kept as a `LEVEL logger: message` line (`ToolLogHandler`) and appended to
  the outcome's `stdout` when the attempt ends.

Every line goes to the listener (`OutputListener`: `noetl run` prints them as they come)
masked with the task's secret scope and the values this process knows are secret; the
outcome, with its `stdout`, is masked by the `SecretScope` middleware around this one.
What an attempt keeps is bounded: `TOOL_LOG_LIMIT` characters of tool log lines, and
`STDOUT_LIMIT` in all (the python tool's own output is bounded the same way).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import replace

from noetl.core import Outcome, Task
from noetl.credentials.scope import current_scope
from noetl.redaction import SECRET_VALUES

__all__ = [
    "STDOUT_LIMIT",
    "TOOL_LOG_LIMIT",
    "CaptureOutput",
    "OutputListener",
    "TaskOutput",
    "ToolLogHandler",
    "current_output",
]

STDOUT_LIMIT = 64 * 1024  # characters an attempt's output keeps in all
TOOL_LOG_LIMIT = 16 * 1024  # of which tool log lines
TRUNCATED = "[output truncated]\n"
# The loggers whose records, written while a task runs, are part of its output.
TOOL_LOGGERS = ("noetl.tools", "noetl.sinks", "noetl.worker")

# Told each piece of a task's output as it comes: one or more whole lines (the last one
# may lack its newline when the attempt ended without one), already masked. Called from
# the thread running the task; it must be quick and must not raise.
OutputListener = Callable[[Task, str], None]


class TaskOutput:
    """The output of one attempt of one task."""

    __slots__ = ("_parts", "_size", "_truncated", "listener", "task")

    def __init__(self, task: Task, listener: OutputListener | None) -> None:
        self.task = task
        self.listener = listener
        self._parts: list[str] = []
        self._size = 0
        self._truncated = False

    def live(self, text: str) -> None:
        """Pass on a piece of output kept elsewhere (the python tool's `stdout`)."""
        listener = self.listener
        if listener is None or not text:
            return
        try:
            listener(self.task, _masked(text))
        except Exception:  # a printer's failure must not fail the task
            self.listener = None

    def log(self, line: str) -> None:
        """Keep a tool's log line (bounded) and pass it on."""
        room = TOOL_LOG_LIMIT - self._size
        if room <= 0:
            self._truncated = True
            return
        if not line.endswith("\n"):
            line += "\n"
        kept = line[:room]
        self._parts.append(kept)
        self._size += len(kept)
        self.live(kept)

    def text(self) -> str:
        """The tool log lines kept (with a note when some were left out)."""
        text = "".join(self._parts)
        return text + TRUNCATED if self._truncated else text

    def apply(self, outcome: Outcome) -> Outcome:
        """The outcome with the tool log lines after what the tool itself printed."""
        logged = self.text()
        if not logged:
            return outcome
        stdout = outcome.stdout
        if stdout and not stdout.endswith("\n"):
            stdout += "\n"
        combined = stdout + logged
        if len(combined) > STDOUT_LIMIT:
            combined = combined[: STDOUT_LIMIT - len(TRUNCATED)] + TRUNCATED
        return replace(outcome, stdout=combined)


def _masked(text: str) -> str:
    masked = current_scope().mask(text)
    text = masked if isinstance(masked, str) else text
    if SECRET_VALUES:
        again = SECRET_VALUES.mask(text)
        text = again if isinstance(again, str) else text
    return text


_CURRENT: ContextVar[TaskOutput | None] = ContextVar("noetl_task_output", default=None)


def current_output() -> TaskOutput | None:
    """The output of the task attempt running in this thread (None outside one)."""
    return _CURRENT.get()


class CaptureOutput:
    """Middleware: the task's `TaskOutput` is current while the rest of the chain runs;
    the tool log lines it kept are appended to the outcome's `stdout`."""

    def __init__(self, listener: OutputListener | None = None) -> None:
        self.listener = listener
        ToolLogHandler.install()

    def __call__(self, task: Task, call_next: Callable[[Task], Outcome]) -> Outcome:
        output = TaskOutput(task, self.listener)
        token = _CURRENT.set(output)
        try:
            outcome = call_next(task)
        finally:
            _CURRENT.reset(token)
        return output.apply(outcome)


class ToolLogHandler(logging.Handler):
    """Keeps the records of NoETL's tool loggers written in a task's thread as lines of
    that task's output (records outside a task are left to the other handlers)."""

    _installed: ToolLogHandler | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        output = _CURRENT.get()
        if output is None:
            return
        try:
            output.log(self.format(record))
        except Exception:  # a broken record must not fail the task
            self.handleError(record)

    @classmethod
    def install(cls) -> None:
        """Attach one handler to the tool loggers (once per process)."""
        with cls._lock:
            if cls._installed is not None:
                return
            handler = cls()
            for name in TOOL_LOGGERS:
                logging.getLogger(name).addHandler(handler)
            cls._installed = handler
