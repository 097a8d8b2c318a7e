"""What a tool is, and the optional abilities it may declare.

Every tool is a `Tool`: a `kind` and `run(task) -> Outcome`. Beyond that a tool may be:

* `Cancellable`: `cancel(task_id) -> bool` stops a running task (the python tool kills its
  child process); the worker calls it when the task is canceled and when it runs past its
  deadline. True when it stopped one; the stopped call still returns its failed outcome.
* `Closeable`: `close()` releases what the tool holds (the http tool's connection pool)
  when its registry closes.
* `Waiting`: `waits = True` when its tasks spend their time waiting for other tasks (the
  playbook tool waits for its child execution); runtimes run those outside their bounded
  task slots.
* `CredentialAware`: `uses_credentials = False` when it never reads credentials; its
  tasks then run without a secret scope unless they carry secret references or sinks.
* `Unspilled`: `spills_result = False` when its result is what a step asked to have whole
  (the artifact tool reads a spilled result back): a large result of it is reported as it
  is rather than spilled to the result store again.

The registry reads them once, when a tool is registered (`Abilities.of`). The abilities are
structural: a third-party tool has them by having the method or the attribute, without
importing anything from NoETL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from noetl.core import Outcome, Task

__all__ = [
    "Abilities",
    "Cancellable",
    "Closeable",
    "CredentialAware",
    "Tool",
    "Unspilled",
    "Waiting",
]


class Tool(Protocol):
    """Runs the tasks of one kind."""

    kind: str

    def run(self, task: Task) -> Outcome:
        """Run the task; report every failure in the outcome."""
        ...


@runtime_checkable
class Cancellable(Protocol):
    def cancel(self, task_id: str) -> bool:
        """Stop the running task `task_id`; True when this tool was running it."""
        ...


@runtime_checkable
class Closeable(Protocol):
    def close(self) -> None:
        """Release what the tool holds; the next task may acquire it again."""
        ...


@runtime_checkable
class Waiting(Protocol):
    waits: bool


@runtime_checkable
class CredentialAware(Protocol):
    uses_credentials: bool


@runtime_checkable
class Unspilled(Protocol):
    spills_result: bool


@dataclass(frozen=True, slots=True)
class Abilities:
    """The abilities of one tool, read once (see the module docstring)."""

    cancel: Callable[[str], bool] | None = None
    close: Callable[[], None] | None = None
    waits: bool = False
    uses_credentials: bool = True
    spills_result: bool = True

    @classmethod
    def of(cls, tool: object) -> Abilities:
        cancel = tool.cancel if isinstance(tool, Cancellable) and callable(tool.cancel) else None
        close = tool.close if isinstance(tool, Closeable) and callable(tool.close) else None
        return cls(
            cancel=cancel,
            close=close,
            waits=isinstance(tool, Waiting) and tool.waits is True,
            # A tool says False to go without a scope; anything else keeps it.
            uses_credentials=not (
                isinstance(tool, CredentialAware) and tool.uses_credentials is False
            ),
            spills_result=not (isinstance(tool, Unspilled) and tool.spills_result is False),
        )
