"""The embedded runtime's workers: threads that run tools and report their outcomes.

Most tasks run in bounded thread pools of two lanes: python tasks in as many threads as
the python pool has processes (a thread more would only wait for a child, contending for
the interpreter lock with the deciding thread), every other tool (http, postgres,
duckdb...) in a lane of many more threads, since those mostly wait on I/O. A python
lane thread sends short python tasks queued behind its first to its child in one batch
(`AHEAD`). Tasks whose tool waits for other tasks (`playbook`: a child execution in this
same runtime) run in threads of their own: a parent waiting in a pool slot could
otherwise hold the slot its child needs. A worker hands `(task, outcome)` to the
runtime (`noetl.runtime.embedded`), which may decide a lone outcome on the worker's own
thread; a python task that decision dispatches is then kept for that thread (`submit`),
sent to a child at once, and run by the thread as soon as the decision is written: a
chain's steps run in one thread, with no handoff to another thread between two steps.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from noetl.core import Outcome, Task
from noetl.decision.workloads import with_workload
from noetl.worker.ahead import AHEAD, Pace, pool_of, run_ahead, sendable
from noetl.worker.python_pool import PythonPool
from noetl.worker.tools import ToolRegistry

__all__ = ["AHEAD", "ThreadWorkers", "call_later", "drained"]

T = TypeVar("T")


def call_later(delay_s: float, call: Callable[..., None], *args: Any) -> None:
    """`call(*args)` now, or from a timer thread after `delay_s`."""
    if delay_s <= 0:
        call(*args)
        return
    timer = threading.Timer(delay_s, call, args=args)
    timer.daemon = True
    timer.start()


def drained(items: queue.SimpleQueue[T]) -> list[T]:
    """What `items` holds now, taken out of it (without waiting)."""
    out: list[T] = []
    while True:
        try:
            out.append(items.get_nowait())
        except queue.Empty:
            return out


class ThreadWorkers:
    """Runs tasks in threads, each outcome to `report`: python tasks in `workers` threads,
    other tools in `io_workers` (default: as many). `workload` gives the workload
    of an execution (tasks do not carry it, see noetl.decision.workloads) and `canceled`
    whether a decision canceled a task still queued (it is then not run)."""

    def __init__(
        self,
        tools: ToolRegistry,
        workers: int,
        *,
        io_workers: int | None = None,
        report: Callable[[tuple[Task, Outcome]], None],
        workload: Callable[[str], dict[str, Any]],
        canceled: Callable[[Task], bool],
    ) -> None:
        self.tools = tools
        # Queued python tasks go to a child several at a time (`noetl.worker.ahead`).
        self._ahead = pool_of(tools)
        self._pace = Pace()
        self._report = report
        self._workload = workload
        self._canceled = canceled
        # A plain queue and threads: an executor's future per task is a cost a loop item
        # pays on the deciding thread, and nothing here reads the future.
        self._python: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        # Per thread: `keeps` (a python lane thread) and, while its report is decided,
        # `kept` (the python task that decision dispatched, for this thread to run next).
        self._local = threading.local()
        self._io: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        lanes = [(self._python, "python", workers), (self._io, "io", io_workers or workers)]
        # Each thread with its lane (a closing lane gets a stop mark per thread).
        self._threads = [
            (
                threading.Thread(
                    target=self._serve, args=(lane,), name=f"noetl-{name}-{n}", daemon=True
                ),
                lane,
            )
            for lane, name, count in lanes
            for n in range(max(1, count))
        ]
        self._waiters: set[threading.Thread] = set()
        self._closed = threading.Event()
        for thread, _ in self._threads:
            thread.start()

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed.is_set()

    def close(self) -> None:
        """Stop taking tasks; wait for the waiting threads (a while) and the pool."""
        self._closed.set()
        for thread in self._waiters.copy():
            thread.join(timeout=5.0)
        for _, lane in self._threads:
            lane.put(None)
        for thread, _ in self._threads:
            thread.join()

    def submit(self, task: Task) -> None:
        """Run a task: in the pool, or in a thread of its own if it waits for others."""
        if self._closed.is_set():
            return
        if self.tools.waits(task.kind):
            # It waits for tasks of its own (a child execution): a pool slot held while
            # waiting could be the one those tasks need.
            thread = threading.Thread(
                target=self._execute_waiting,
                args=(task,),
                name=f"noetl-wait-{task.task_id}",
                daemon=True,
            )
            self._waiters.add(thread)
            thread.start()
        elif task.kind != "python":
            self._io.put(task)
        elif (kept := getattr(self._local, "kept", None)) is not None and not kept:
            # Dispatched by the decision of this python thread's own outcome (a chain's
            # next step): this thread runs it next, already at work in a child.
            kept.append(self._start_early(task))
        else:
            self._python.put(task)

    def _start_early(self, task: Task) -> Task:
        """`task` sent to a free child now (`PythonPool.start_early`), its workload
        attached, when it is short and sendable; else as it is. It runs while its dispatch
        is written, and this thread's run of it takes the reply."""
        pool = self._ahead
        if pool is None or not (self._pace.short and sendable(task)) or self._canceled(task):
            return task
        attached = with_workload(task, self._workload(task.execution_id))
        return attached if pool.start_early(attached) else task

    def _serve(self, lane: queue.SimpleQueue[Task | None]) -> None:
        """A pool thread: run the lane's queued tasks until closed (those still queued then
        are not run)."""
        self._local.keeps = lane is self._python
        while True:
            task = lane.get()
            if task is None or self._closed.is_set():
                return
            if self._ahead is None or lane is not self._python:
                self._chain(task)
                continue
            batch, stop = self._more(lane, task)
            if len(batch) > 1:
                batch = self._run_ahead(self._ahead, batch)
            for queued in batch:  # each in its own chain; those run ahead take their reply
                if self._closed.is_set():
                    break
                self._chain(queued)
            if len(batch) > 1:
                self._ahead.forget_ahead(batch)
            if stop or self._closed.is_set():
                return

    def _more(self, lane: queue.SimpleQueue[Task | None], first: Task) -> tuple[list[Task], bool]:
        """`first` and python tasks queued behind it, while the lane's tasks are short (see
        `AHEAD`); True when the lane's stop mark came meanwhile."""
        batch = [first]
        if not self._pace.short:
            return batch, False
        while len(batch) < AHEAD:
            try:
                task = lane.get_nowait()
            except queue.Empty:
                return batch, False
            if task is None:
                return batch, True
            batch.append(task)
        return batch, False

    def _run_ahead(self, pool: PythonPool, batch: list[Task]) -> list[Task]:
        """Run the batch's python tasks in one child (`noetl.worker.ahead`), but not those
        canceled; the batch with their workloads attached (once, for both runs)."""
        attached: list[Task] = []
        ready: list[Task] = []
        for queued in batch:
            task = queued
            if not self._canceled(queued):
                task = with_workload(queued, self._workload(queued.execution_id))
                ready.append(task)
            attached.append(task)
        run_ahead(pool, ready)
        return attached

    def _chain(self, task: Task | None) -> None:
        """Run `task`, then the task its outcome's decision kept for this thread
        (`submit`), and so on; one kept as the workers close is not run."""
        while task is not None:
            if self._closed.is_set():
                if self._ahead is not None:
                    self._ahead.forget_early(task)  # its child is given back
                return
            task = self._execute(task)

    def _execute_waiting(self, task: Task) -> None:
        try:
            self._execute(task)
        finally:
            self._waiters.discard(threading.current_thread())

    def _execute(self, task: Task) -> Task | None:
        """Worker thread: run one task and report its outcome (never raises); the python
        task the report's decision kept for this thread, if any."""
        if self._canceled(task):
            outcome = Outcome(
                task_id=task.task_id, ok=False, error="canceled", error_type="CancelError"
            )
        else:
            # Tasks do not carry the workload (noetl.decision.workloads): it is the state's.
            task = with_workload(task, self._workload(task.execution_id))
            outcome = self.tools.run(task)  # never raises: a tool's failure is an outcome
            self._pace.observe(task, outcome)
        if self._ahead is not None:
            self._ahead.forget_early(task)  # sent early and not run (canceled): given back
        local = self._local
        if not getattr(local, "keeps", False):
            self._report((task, outcome))
            return None
        kept: list[Task] = []
        local.kept = kept
        try:
            self._report((task, outcome))
        finally:
            local.kept = None
        return kept[0] if kept else None
