"""A pipeline's progress, kept between its attempts (`noetl.worker.pipeline`).

After each of its tasks, a pipeline saves its progress as the checkpoint of its task id
(`store.checkpoints`): the next task to run, the tries of a rule's retry, the task runs so
far, `_prev`, the results by label, the names and variables its tasks `set`, and the runs
not reported yet. The next attempt of the same task (a retry a rule asked for, a retry of
the step's policy, a worker lost and its lease recovered, a replay from the dead-letter
queue) resumes there: a task whose run was saved is not run again.

`end` says how the attempt that saved it ended: None (it was running: the worker died),
`retry` (a rule asked for a retry: the next attempt goes on counting its tries), `fail`
(the next attempt starts that task's tries anew, and a replay from the dead-letter
queue, whose attempts count from 1 again, takes it over). A pipeline that ends well
forgets its checkpoint. A value that is not a progress is ignored.

Without a checkpoint store (a registry built without one), the progress is kept in the
worker's memory (`LocalCheckpoints`), which serves the retries that worker runs.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from noetl.core import Task
from noetl.store.records import Checkpoint

__all__ = ["MAX_TRACE", "LocalCheckpoints", "Progress", "restarts_chain", "trace_entry"]

MAX_TRACE = 100  # task runs one outcome reports (later ones are counted, not listed)
_MAX_ERROR = 300  # characters of a task's error in a trace entry
_VERSION = 1


@dataclass(slots=True)
class Progress:
    """Where a pipeline is: see the module docstring."""

    index: int = 0
    tries: int = 0
    runs: int = 0
    prev: Any = None
    results: dict[str, Any] = field(default_factory=dict)
    names: dict[str, Any] = field(default_factory=dict)
    ctx: dict[str, Any] = field(default_factory=dict)
    iter: dict[str, Any] = field(default_factory=dict)
    ctx_patch: dict[str, Any] = field(default_factory=dict)
    end: str | None = None
    trace: list[dict[str, Any]] = field(default_factory=list)
    more: int = 0  # task runs past MAX_TRACE, not listed

    def to_value(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "index": self.index,
            "tries": self.tries,
            "runs": self.runs,
            "prev": self.prev,
            "results": self.results,
            "names": self.names,
            "ctx": self.ctx,
            "iter": self.iter,
            "ctx_patch": self.ctx_patch,
            "end": self.end,
            "trace": self.trace,
            "more": self.more,
        }

    @classmethod
    def of_value(cls, value: Any) -> Progress | None:
        """The progress a checkpoint holds; None when it holds something else."""
        if not isinstance(value, Mapping) or value.get("version") != _VERSION:
            return None
        counts: dict[str, int] = {}
        for key in ("index", "tries", "runs", "more"):
            number = value.get(key)
            if not isinstance(number, int) or isinstance(number, bool) or number < 0:
                return None
            counts[key] = number
        maps: dict[str, dict[str, Any]] = {}
        for key in ("results", "names", "ctx", "iter", "ctx_patch"):
            held = value.get(key)
            if not isinstance(held, dict):
                return None
            maps[key] = held
        trace, end = value.get("trace"), value.get("end")
        if not isinstance(trace, list) or end not in (None, "retry", "fail"):
            return None
        return cls(
            index=counts["index"],
            tries=counts["tries"],
            runs=counts["runs"],
            prev=value.get("prev"),
            results=maps["results"],
            names=maps["names"],
            ctx=maps["ctx"],
            iter=maps["iter"],
            ctx_patch=maps["ctx_patch"],
            end=end,
            trace=[dict(t) for t in trace if isinstance(t, Mapping)][:MAX_TRACE],
            more=counts["more"],
        )

    def resumed(self) -> Progress:
        """The progress a new attempt starts from: a rule's pending retry goes on counting
        its tries; the runs of an attempt that died are still to be reported."""
        tries = self.tries if self.end == "retry" else 0
        died = self.end is None
        return Progress(
            index=self.index,
            tries=tries,
            runs=self.runs,
            prev=self.prev,
            results=dict(self.results),
            names=dict(self.names),
            ctx=dict(self.ctx),
            iter=dict(self.iter),
            ctx_patch=dict(self.ctx_patch),
            trace=list(self.trace) if died else [],
            more=self.more if died else 0,
        )

    def record(self, entry: dict[str, Any]) -> None:
        """Note one task run for the outcome (at most MAX_TRACE listed)."""
        if len(self.trace) < MAX_TRACE:
            self.trace.append(entry)
        else:
            self.more += 1

    def reported(self) -> tuple[dict[str, Any], ...]:
        """The task runs the outcome lists (a last `{more: n}` counts the rest)."""
        listed = tuple(self.trace)
        return (*listed, {"more": self.more}) if self.more else listed


def trace_entry(
    label: str,
    attempt: int,
    tries: int,
    *,
    ok: bool,
    do: str,
    duration_ms: float,
    error: str | None,
    to: str | None = None,
) -> dict[str, Any]:
    """One task run as the outcome lists it."""
    entry: dict[str, Any] = {
        "task": label,
        "attempt": attempt,
        "try": tries,
        "ok": ok,
        "do": do,
        "duration_ms": round(duration_ms, 3),
    }
    if not ok and error:
        entry["error"] = error if len(error) <= _MAX_ERROR else error[:_MAX_ERROR] + "..."
    if to is not None:
        entry["to"] = to
    return entry


class LocalCheckpoints:
    """Checkpoints in this process's memory (the most recent `limit` task ids), for a
    pipeline tool built without a checkpoint store."""

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, Checkpoint] = OrderedDict()

    def save(self, task_id: str, execution_id: str, attempt: int, value: Any) -> bool:
        with self._lock:
            kept = self._kept.get(task_id)
            if kept is not None and kept.attempt > attempt:
                return False
            self._kept[task_id] = Checkpoint(task_id, execution_id, attempt, copy.deepcopy(value))
            self._kept.move_to_end(task_id)
            while len(self._kept) > self._limit:
                self._kept.popitem(last=False)
            return True

    def load(self, task_id: str) -> Checkpoint | None:
        with self._lock:
            return self._kept.get(task_id)

    def drop(self, task_id: str) -> None:
        with self._lock:
            self._kept.pop(task_id, None)


def restarts_chain(task: Task, kept: Progress) -> bool:
    """Whether an attempt runs the chain from its first task although an earlier attempt
    saved its progress: the step's retry has `scope: chain` (the engine marks the task
    `restart_on_retry`) and that attempt failed, so the engine retries it. An attempt
    that died (lease recovery), one a rule's retry follows, and the first attempt of a
    replay from the dead-letter queue resume where the progress stands."""
    return task.spec.get("restart_on_retry") is True and kept.end == "fail" and task.attempt > 1
