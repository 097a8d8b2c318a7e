"""A task's workload, added where it runs: tasks do not carry a copy of it.

The workload is stored once, in the execution's `workflow.started` event. The engine
builds tasks without it (`TemplateContext.tool_view`), so the events that dispatch them
and their queue rows stay small however large the workload and however many the tasks;
the runtime that runs a task adds the workload to the context its tool sees (a python
tool's `context["workload"]`, the templates of its sinks). A task queued by an older
version still carries its own copy, and keeps it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from noetl.core import EventType, NotFoundError, Task
from noetl.core.evolve import evolve
from noetl.dsl.limits import check_data
from noetl.store.base import Store

__all__ = ["Workloads", "context_with_workload", "stored_workload", "with_workload"]


def with_workload(task: Task, workload: Mapping[str, Any]) -> Task:
    """`task` with `workload` in its context, unless its context has one already."""
    if "workload" in task.context:
        return task
    return evolve(task, context=context_with_workload(task.context, workload))


def context_with_workload(context: Mapping[str, Any], workload: Any) -> dict[str, Any]:
    """`context` with `workload` after `step`, where a task's context used to hold it."""
    out: dict[str, Any] = {}
    for key, value in context.items():
        out[key] = value
        if key == "step":
            out["workload"] = workload
    out.setdefault("workload", workload)
    return out


def stored_workload(store: Store, execution_id: str) -> dict[str, Any]:
    """The workload of a stored execution: the payload of its first event. NotFoundError
    when there is no such execution."""
    events = store.load_events(execution_id, limit=1)
    if not events or events[0].type != EventType.WORKFLOW_STARTED:
        raise NotFoundError(f"execution {execution_id} has no workflow.started event")
    workload = events[0].payload.get("workload")
    return dict(workload) if isinstance(workload, Mapping) else {}


# A workload bigger than this (as JSON) is not kept for the next task: it is read again.
KEEP_BYTES = 1024 * 1024


class Workloads:
    """Workloads by execution id, each loaded once (`load`) and kept for the next tasks of
    the execution (LRU of `size`): a workload never changes. One over `KEEP_BYTES` is
    loaded for each task instead, so a worker's memory does not hold many of them.
    Thread-safe."""

    def __init__(self, load: Callable[[str], dict[str, Any]], *, size: int = 64) -> None:
        self._load = load
        self._size = size
        self._lock = threading.Lock()
        self._known: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def of(self, execution_id: str) -> dict[str, Any]:
        with self._lock:
            found = self._known.get(execution_id)
            if found is not None:
                self._known.move_to_end(execution_id)
                return found
        workload = self._load(execution_id)
        self.offer(execution_id, workload)
        return workload

    def known(self, execution_id: str) -> bool:
        with self._lock:
            return execution_id in self._known

    def offer(self, execution_id: str, workload: dict[str, Any]) -> None:
        """Keep `workload` for `execution_id` (loaded by `of`, or read by someone else from
        its log), unless it is over `KEEP_BYTES`."""
        problem = check_data(workload, max_bytes=KEEP_BYTES)
        if problem is not None and problem.kind == "size":
            return
        with self._lock:
            self._known[execution_id] = workload
            while len(self._known) > self._size:
                self._known.popitem(last=False)

    def attach(self, task: Task) -> Task:
        """`task` with its execution's workload in its context (see `with_workload`)."""
        if "workload" in task.context:
            return task
        return with_workload(task, self.of(task.execution_id))
