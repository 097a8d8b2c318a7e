"""A built-in tool imported by the first task of its kind.

The http, postgres and duckdb tools stand on libraries (httpx, psycopg, duckdb) that take
longer to import than most playbooks take to run; a worker registers them as `LazyTool`s,
so only the ones a playbook uses are imported, when their first task runs. A tool whose
library comes with a pip extra that is not installed fails its tasks with the advice to
install it (`noetl.extras`), never with an ImportError.
"""

from __future__ import annotations

import importlib
import threading
import time

from noetl.core import Outcome, Task
from noetl.errors import MissingExtraError
from noetl.extras import load, needs_extra
from noetl.tools.abilities import Closeable, Tool

__all__ = ["LazyTool"]


class LazyTool:
    """Stands for the tool `target` (`module:Class`, built with no arguments) of `kind`,
    imported on its first task. `extra`: the pip extra its module's library comes with
    (None: a base dependency). It declares `close` (the loaded tool's, when it has one)
    and no other ability: the tools it stands for declare no other."""

    def __init__(self, kind: str, target: str, *, extra: str | None = None) -> None:
        self.kind = kind
        self._target = target
        self._extra = extra
        self._tool: Tool | None = None
        self._lock = threading.Lock()

    def loaded(self) -> Tool:
        """The tool itself, imported now if it was not (MissingExtraError: its extra is
        not installed)."""
        with self._lock:
            if self._tool is None:
                module, _, name = self._target.partition(":")
                if self._extra is None:
                    imported = importlib.import_module(module)
                else:
                    imported = load(module, self._extra, f"the {self.kind} tool")
                self._tool = getattr(imported, name)()
            return self._tool

    def run(self, task: Task) -> Outcome:
        started = time.perf_counter()
        try:
            tool = self.loaded()
        except MissingExtraError:
            assert self._extra is not None  # only a tool of an extra is missing
            return Outcome(
                task_id=task.task_id,
                ok=False,
                error=needs_extra(f"step '{task.step}' uses the {self.kind} tool", self._extra),
                error_type="MissingExtraError",
                retryable=False,
                duration_ms=(time.perf_counter() - started) * 1000,
            )
        return tool.run(task)

    def close(self) -> None:
        tool = self._tool
        if isinstance(tool, Closeable):
            tool.close()
