"""The embedded runtime: the engine, a store and an in-process worker pool in one process.

The caller's thread (in `wait`) decides: worker threads run tools and hand outcomes back
through a queue; the deciding thread drains every outcome that is ready, lets the engine
decide on each, and writes all resulting events and projection changes in ONE store
transaction. So per-step cost does not grow with the log. A lone outcome (no other task in
flight) is decided on its worker's thread instead, when the deciding thread is idle: the
same decision under the same lock, which saves a chain two thread handoffs a step (the
worker then runs the next step itself, `noetl.runtime.workers`). Whichever thread decides
holds the lock, so decisions are never concurrent.

The worker threads are in `noetl.runtime.workers`. A tool that waits for other tasks
(`playbook`: a child execution in this same runtime) starts its child from its own thread
(`start` and the orchestrator's turn hold one lock), and `wait` drives the children of the
executions it waits for too (`noetl.runtime.family`).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from noetl.core import (
    CancelTasks,
    ConcurrencyError,
    Decision,
    EnqueueTask,
    Event,
    EventType,
    ExecutionStatus,
    Outcome,
    RequeueTask,
    StartTimer,
    Task,
)
from noetl.decision.appends import build_append
from noetl.decision.complexity import admit
from noetl.decision.records import RunResult, merge_workload, new_execution_id, new_record
from noetl.decision.spilled import with_reader
from noetl.dsl.model import Playbook
from noetl.engine import Engine, ExecutionState
from noetl.engine.options import EngineOptions
from noetl.observability import NOOP, Observer
from noetl.observability.trace_context import TraceSampler
from noetl.runtime.compiled import PlaybookCache
from noetl.runtime.failures import TurnDecisions, aborted, commit_each, isolatable
from noetl.runtime.family import ExecutionFamily
from noetl.runtime.watch import StatusWatch
from noetl.runtime.workers import ThreadWorkers, call_later, drained
from noetl.store.base import Append, Store
from noetl.worker.tools import ToolRegistry

Clock = Callable[[], float]
# A turn with fewer outcomes than this, while more tasks are in flight, waits this long for
# the others before it commits.
LINGER_BELOW = 32
LINGER_S = 0.0005


@dataclass
class _Execution:
    engine: Engine
    state: ExecutionState
    started_at: float


class EmbeddedRuntime:
    """Runs executions to completion in this process."""

    def __init__(
        self,
        store: Store,
        tools: ToolRegistry,
        *,
        workers: int = 2,
        io_workers: int | None = None,
        clock: Clock = time.time,
        observer: Observer = NOOP,
        options: EngineOptions | None = None,
        sampler: TraceSampler | None = None,
    ) -> None:
        self.store = store
        # The engine's defaults (retries, timeouts, policies), for every execution here.
        self.options = with_reader(options or EngineOptions(), store.results)
        self.tools = tools
        self.clock = clock
        self.observer = observer
        # Tracing on: the tasks of a traced execution carry their trace context.
        self.sampler = sampler
        # Outcomes for the deciding thread; None wakes it (a worker decided and an execution
        # ended, or deciding failed: `_failure`, raised by the next turn).
        self._outcomes: queue.SimpleQueue[tuple[Task, Outcome] | None] = queue.SimpleQueue()
        self._failure: BaseException | None = None
        self._pool = ThreadWorkers(
            tools,
            workers,
            io_workers=io_workers,
            report=self._report,
            workload=lambda execution_id: self._executions[execution_id].state.workload,
            canceled=lambda task: task.task_id in self._canceled.get(task.execution_id, ()),
        )
        self._executions: dict[str, _Execution] = {}
        self._playbooks = PlaybookCache()
        self._cancel_requests: queue.SimpleQueue[str] = queue.SimpleQueue()
        # Timers that came due: (execution id, the StartTimer payload).
        self._timers: queue.SimpleQueue[tuple[str, dict[str, Any]]] = queue.SimpleQueue()
        # `start` may be called from a tool's thread (a child execution): it and the
        # deciding part of a turn hold this lock.
        self._lock = threading.RLock()
        self._family = ExecutionFamily()
        # Tasks dispatched whose outcomes have not been taken yet (changed under `_lock`).
        self._in_flight = 0
        # Tasks dispatched per running execution, to run again on a RequeueTask (a retry).
        self._tasks: dict[str, dict[str, Task]] = {}
        # Tasks a decision canceled, per running execution: one still queued is not run.
        self._canceled: dict[str, set[str]] = {}
        # An execution finished by another process (a cancel over the database) stops here.
        self._watch = StatusWatch(store)

    # --- public --------------------------------------------------------------------------

    def start(
        self,
        playbook: Playbook,
        *,
        workload: dict[str, Any] | None = None,
        source_text: str = "",
        path: str | None = None,
        parent_execution_id: str | None = None,
        execution_id: str | None = None,
    ) -> str:
        """Create an execution (`execution_id`, else a new id) and dispatch its first
        tasks; returns its id. Thread-safe. ConcurrencyError when an execution with the
        given id exists already (nothing is written then)."""
        with self._lock:
            now = self.clock()
            execution_id = execution_id or new_execution_id(now)
            if execution_id in self._executions:
                raise ConcurrencyError(f"execution {execution_id} exists", [execution_id])
            merged = merge_workload(playbook.workload, workload or {})
            admit(playbook, merged, self.options)  # TooComplexError over complexity.refuse
            engine = Engine(self._playbooks.graph(playbook), options=self.options)
            state = engine.new_state(execution_id)
            execution = _Execution(engine=engine, state=state, started_at=now)
            decision = engine.start(state, merged, now)
            (initial,) = self._appends([(execution, 0, decision)], now)
            record = new_record(
                playbook,
                execution_id,
                text=source_text,
                path=path,
                now=now,
                parent_execution_id=parent_execution_id,
            )
            # The row and its start in one write; the compiled playbook lets another
            # process (a replay from the dead-letter queue) decide for it later.
            compiled = self._playbooks.compiled(playbook)
            self.store.create_execution(record, initial, compiled=compiled)
            self.observer.committed(engine.graph, state, decision.events)
            self._executions[execution_id] = execution
            if parent_execution_id is not None and parent_execution_id in self._executions:
                self._family.add_child(parent_execution_id, execution_id)
            self._dispatch([(execution, 0, decision)])
            return execution_id

    def cancel(self, execution_id: str) -> None:
        """Ask for an execution to be canceled (thread-safe; takes effect at the next turn)."""
        self._cancel_requests.put(execution_id)

    def wait(
        self,
        execution_ids: Iterable[str],
        *,
        on_progress: Callable[[dict[str, ExecutionState]], None] | None = None,
        progress_interval: float = 0.1,
    ) -> list[RunResult]:
        """Drive executions until all are finished; returns their results in order.
        ConcurrencyError when another process finished one of them (its running tasks are
        canceled first)."""
        ids = list(execution_ids)
        self._raise_failure()
        pending = self._unfinished(ids)
        last_progress = 0.0
        while pending:
            self._turn(timeout=progress_interval)
            pending = self._unfinished(ids)
            elsewhere = self._watch.finished_elsewhere(pending)
            if elsewhere is not None:
                self._stop(*elsewhere)
            if on_progress is not None and time.monotonic() - last_progress >= progress_interval:
                last_progress = time.monotonic()
                with self._lock:  # a worker's thread may be deciding
                    on_progress({i: self._executions[i].state for i in ids})
        self._raise_failure()
        if on_progress is not None:
            with self._lock:
                on_progress({i: self._executions[i].state for i in ids})
        return [self.result(i) for i in ids]

    def run(
        self,
        playbook: Playbook,
        *,
        workload: dict[str, Any] | None = None,
        source_text: str = "",
        path: str | None = None,
        on_progress: Callable[[dict[str, ExecutionState]], None] | None = None,
    ) -> RunResult:
        """Start one execution and wait for it."""
        execution_id = self.start(playbook, workload=workload, source_text=source_text, path=path)
        return self.wait([execution_id], on_progress=on_progress)[0]

    def result(self, execution_id: str) -> RunResult:
        execution = self._executions[execution_id]
        state = execution.state
        return RunResult(
            execution_id=execution_id,
            status=state.status,
            steps=state.step_summaries(),
            context=dict(state.context),
            started_at=execution.started_at,
            finished_at=state.finished_at or self.clock(),
            error=state.error,
            ctx=dict(state.ctx),
        )

    def state(self, execution_id: str) -> ExecutionState:
        return self._executions[execution_id].state

    @property
    def closed(self) -> bool:
        """True once `close` was called (tools waiting for children give up then)."""
        return self._pool.closed

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> EmbeddedRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the orchestrator turn -----------------------------------------------------------

    def _report(self, item: tuple[Task, Outcome]) -> None:
        """A worker's outcome: to the deciding thread, or, when it is the only task in
        flight and that thread is idle (the lock free, nothing queued), decided on this
        thread now (see the module's docstring)."""
        if self._in_flight == 1 and self._outcomes.empty() and self._lock.acquire(False):
            try:
                if self._in_flight == 1 and self._outcomes.empty() and self._failure is None:
                    self._in_flight = 0
                    self._decide_here(item)
                    return
            finally:
                self._lock.release()
        self._outcomes.put(item)

    def _decide_here(self, item: tuple[Task, Outcome]) -> None:
        """Decide a worker's outcome on its thread (the lock held); the deciding thread is
        woken when its execution ended (`wait` looks again) or deciding raised (its turn
        raises it, as its own deciding would have)."""
        try:
            self._decide([item])
        except BaseException as exc:
            self._failure = exc
            self._outcomes.put(None)
            return
        execution = self._executions.get(item[0].execution_id)
        if execution is None or execution.state.terminal:
            self._outcomes.put(None)

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _turn(self, timeout: float) -> None:
        """Wait for outcomes, decide on every one that is ready, commit once, dispatch."""
        self._raise_failure()
        batch: list[tuple[Task, Outcome]] = []
        with contextlib.suppress(queue.Empty):
            first = self._outcomes.get(timeout=timeout)
            if first is None:
                self._raise_failure()
            else:
                batch.append(first)
        self._drain(batch)
        if 0 < len(batch) < LINGER_BELOW and self._in_flight > len(batch):
            # More outcomes are on their way (a parallel loop): a moment's wait lets one
            # commit carry them all, which costs far less than a commit each. A lone task
            # (a chain) never waits here.
            time.sleep(LINGER_S)
            self._drain(batch)
        with self._lock:  # `start` (a child execution, from a tool's thread) dispatches too
            self._in_flight -= len(batch)
            self._decide(batch)

    def _drain(self, batch: list[tuple[Task, Outcome]]) -> None:
        batch.extend(item for item in drained(self._outcomes) if item is not None)

    def _decide(self, batch: list[tuple[Task, Outcome]]) -> None:
        now = self.clock()
        turn: TurnDecisions[_Execution] = TurnDecisions(now)
        for execution_id in drained(self._cancel_requests):
            execution = self._executions.get(execution_id)
            if execution is not None and not execution.state.terminal:
                event = Event(
                    0, EventType.CANCEL_REQUESTED, execution_id, now, None, {"by": "user"}
                )
                turn.decide(execution, event)
        for execution_id, payload in drained(self._timers):
            execution = self._executions.get(execution_id)
            if execution is not None and not execution.state.terminal:
                turn.decide(
                    execution, Event(0, EventType.TIMER_FIRED, execution_id, now, None, payload)
                )
        for task, outcome in batch:
            execution = self._executions.get(task.execution_id)
            if execution is None:
                continue
            event = Event(
                0, EventType.TOOL_PROCESSED, task.execution_id, now, task.step, outcome.to_payload()
            )
            turn.decide(execution, event)
        decisions = turn.kept()
        for execution_id, exc in turn.failed.items():
            decisions.extend(self._aborted(execution_id, exc, now))
        if decisions:
            self._commit(decisions, now)
        self._forget(batch)

    def _forget(self, batch: list[tuple[Task, Outcome]]) -> None:
        """Let go of the tasks this turn finished (a long loop's would pile up)."""
        for task, _ in batch:
            execution = self._executions.get(task.execution_id)
            tasks = self._tasks.get(task.execution_id)
            if (
                tasks is not None
                and execution is not None
                and task.task_id not in execution.state.tasks
            ):
                tasks.pop(task.task_id, None)

    def _commit(self, decisions: list[tuple[_Execution, int, Decision]], now: float) -> None:
        """Commit a turn's decisions, their tasks started first so the write overlaps
        their run (a chain's next step runs while its dispatch is written).

        Nothing is decided on a dispatch the log does not hold: outcomes are decided by
        this one thread, after this commit. A crash before the commit loses the dispatch,
        and the task (which may have run) runs again when its execution resumes, as a crash
        after a task and before its outcome's commit always could make it."""
        appends = self._appends(decisions, now)
        self._dispatch(decisions)
        try:
            self.store.commit(appends)
        except Exception as exc:
            if not isolatable(exc):
                raise
            # The store refused the batch for the data of some execution in it.
            written = commit_each(
                decisions,
                lambda group: self.store.commit(self._appends(group, now)),
                lambda execution_id, exc: self._aborted(execution_id, exc, now),
            )
            self._withdraw(decisions, written)
            decisions = written
        self._observe(decisions)

    def _withdraw(
        self,
        dispatched: list[tuple[_Execution, int, Decision]],
        written: list[tuple[_Execution, int, Decision]],
    ) -> None:
        """After a refused batch: cancel the tasks started for decisions that were not
        written (their executions ended failed instead), and carry out those endings."""
        kept = {id(decision) for _, _, decision in written}
        ended = [entry for entry in written if not any(entry[2] is d for _, _, d in dispatched)]
        for execution, _, decision in dispatched:
            if id(decision) in kept:
                continue
            execution_id = execution.state.execution_id
            canceled = self._canceled.setdefault(execution_id, set())
            for command in decision.commands:
                if isinstance(command, EnqueueTask):
                    canceled.add(command.task.task_id)
                    self.tools.cancel(command.task.task_id)
        self._dispatch(ended)

    def _aborted(
        self, execution_id: str, exc: Exception, now: float
    ) -> list[tuple[_Execution, int, Decision]]:
        """The decision that fails an execution that could not be decided or written
        (noetl.runtime.failures)."""
        stored = lambda: self.store.load_events(execution_id)  # noqa: E731
        return aborted(execution_id, self._executions[execution_id], exc, stored, now)

    def _observe(self, decisions: list[tuple[_Execution, int, Decision]]) -> None:
        if self.observer is not NOOP:
            for execution, _, decision in decisions:
                self.observer.committed(execution.engine.graph, execution.state, decision.events)

    def _appends(
        self, decisions: list[tuple[_Execution, int, Decision]], now: float
    ) -> list[Append]:
        """One append per execution (its decisions of this turn chained)."""
        grouped: dict[str, tuple[_Execution, int, list[Event]]] = {}
        for execution, before, decision in decisions:
            entry = grouped.get(execution.state.execution_id)
            if entry is None:
                grouped[execution.state.execution_id] = (execution, before, list(decision.events))
            else:
                entry[2].extend(decision.events)
        return [
            build_append(
                execution.state,
                before=before,
                events=events,
                commands=(),
                now=now,
                find_task=self._task_finder(execution_id),
                playbook=execution.engine.playbook,
                complexity_warn=self.options.complexity_warn,
            )
            for execution_id, (execution, before, events) in grouped.items()
        ]

    def _task_finder(self, execution_id: str) -> Callable[[str], dict[str, Any] | None]:
        def find(task_id: str) -> dict[str, Any] | None:
            task = self._tasks.get(execution_id, {}).get(task_id)
            return None if task is None else task.to_dict()

        return find

    def _dispatch(self, decisions: list[tuple[_Execution, int, Decision]]) -> None:
        # On CancelTasks a running python task's child is killed (the tools' `cancel`) and
        # a task still queued is not run; their outcomes are discarded by the engine.
        for execution, _, decision in decisions:
            tasks = self._tasks.setdefault(execution.state.execution_id, {})
            stamp = self._stamp(execution.state)
            for command in decision.commands:
                if isinstance(command, CancelTasks):
                    canceled = self._canceled.setdefault(execution.state.execution_id, set())
                    for task_id in command.task_ids:
                        canceled.add(task_id)
                        self.tools.cancel(task_id)
                if isinstance(command, EnqueueTask):
                    task = command.task if stamp is None else stamp(command.task)
                    tasks[task.task_id] = task
                    self._in_flight += 1
                    self._pool.submit(task)
                elif isinstance(command, RequeueTask):
                    # A retry (or a reclaim): the same task again, with its new attempt,
                    # once its delay has passed; a replay brings its (patched) task.
                    known = command.task or tasks.get(command.task_id)
                    if known is None:
                        continue
                    task = replace(known, attempt=command.attempt)
                    task = task if stamp is None else stamp(task)
                    tasks[task.task_id] = task
                    self._in_flight += 1
                    call_later(command.delay_s, self._pool.submit, task)
                elif isinstance(command, StartTimer):
                    due = (execution.state.execution_id, dict(command.payload))
                    call_later(command.delay_s, self._timers.put, due)
            if execution.state.terminal:
                self._tasks.pop(execution.state.execution_id, None)
                self._canceled.pop(execution.state.execution_id, None)

    def _stamp(self, state: ExecutionState) -> Callable[[Task], Task] | None:
        """How the tasks of this execution are stamped with their trace context; None
        when it is not traced."""
        sampler = self.sampler
        if sampler is None or not sampler.sampled(state.execution_id, state.workload):
            return None
        return sampler.stamp

    def _stop(self, execution_id: str, status: ExecutionStatus) -> None:
        """Another process finished it: its tasks here are canceled, ConcurrencyError."""
        with self._lock:
            running = list(self._tasks.get(execution_id, {}))
            self._canceled.setdefault(execution_id, set()).update(running)
            for task_id in running:
                self.tools.cancel(task_id)
        raise ConcurrencyError(f"execution {execution_id} ended as {status} elsewhere")

    def _unfinished(self, ids: list[str]) -> set[str]:
        """Of `ids` and their child executions, the ones still running."""
        known = self._executions
        terminal = lambda i: None if (e := known.get(i)) is None else e.state.terminal  # noqa: E731
        return self._family.unfinished(ids, terminal, self.cancel)
