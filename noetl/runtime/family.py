"""Parent and child executions in the embedded runtime.

A `playbook` tool starts a child execution in the same runtime. Waiting for an execution
waits for its children too (recursively), and a child still running when its parent has
finished is canceled: nothing waits for it any more.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ExecutionFamily"]


class ExecutionFamily:
    """Which execution started which."""

    def __init__(self) -> None:
        self._children: dict[str, list[str]] = {}
        self._parents: dict[str, str] = {}
        self._orphans: set[str] = set()  # children asked to cancel: their parent finished

    def add_child(self, parent_execution_id: str, execution_id: str) -> None:
        """Record that `parent_execution_id` started `execution_id`."""
        self._children.setdefault(parent_execution_id, []).append(execution_id)
        self._parents[execution_id] = parent_execution_id

    def unfinished(
        self,
        ids: list[str],
        terminal: Callable[[str], bool | None],
        cancel: Callable[[str], None],
    ) -> set[str]:
        """Of `ids` and their child executions (recursively), the ones still running; a
        child whose parent finished is asked to `cancel` (once). `terminal` tells whether
        an execution finished, None for one this runtime does not know."""
        unfinished: set[str] = set()
        todo = list(ids)
        while todo:
            execution_id = todo.pop()
            finished = terminal(execution_id)
            if finished is None:
                continue
            if not finished:
                unfinished.add(execution_id)
                orphan = terminal(self._parents.get(execution_id, "")) is True
                if orphan and execution_id not in self._orphans:
                    self._orphans.add(execution_id)
                    cancel(execution_id)
            todo.extend(self._children.get(execution_id, ()))
        return unfinished
