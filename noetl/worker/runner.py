"""The worker of distributed mode: lease tasks from the store, run tools, report outcomes.

A worker claims tasks (`FOR UPDATE SKIP LOCKED` on PostgreSQL), keeps their leases alive
with heartbeats, runs each tool, and reports the outcome quoting its fencing token; a
result with a stale token (the lease expired and the task went to someone else) is refused
by the store and changes nothing.

Reporting takes one of two paths:

* The inbox: the outcome goes to the store's inbox and a server's orchestrator decides
  what follows. Failures always take this path, so retries, the DLQ and failure policies
  are decided in one place.
* The continuation (when a `Decider` is given): a successful task that was the only task
  in flight of its execution is decided right here, by the same engine against the same
  log, and committed in ONE transaction with the task's completion, under the expected
  sequence number; the tasks it dispatches are leased to this worker in that transaction
  and run at once. A chain of steps then costs one transaction per step instead of two
  process hops through the database. If the execution moved meanwhile (a cancel, another
  server), the commit fails, nothing is written, and the outcome takes the inbox path.

Draining (`noetl worker drain`, or SIGTERM): stop claiming, finish what is in flight, exit.

Tasks whose tool waits for other tasks (`playbook`: a child execution, see
`ToolRegistry.waits`) run in threads of their own and do not count against the claim
window: a worker whose slots all held waiting parents could otherwise never claim the
children's tasks. They are heartbeaten like any task, so their leases stay alive while
they wait. On a hard stop their outcomes are dropped (their waits end early): the lease
expires and the task, run again, finds the child it started.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from noetl.engine import Event, EventType
from noetl.engine.types import Outcome
from noetl.errors import NoetlError
from noetl.observability import NOOP, Observer
from noetl.runtime.decider import Decider
from noetl.runtime.workloads import Workloads, stored_workload
from noetl.store.base import ConcurrencyError, Lease, Store, WorkerRecord
from noetl.worker.tools import ToolRegistry

log = logging.getLogger("noetl.worker")
REPORT_BATCH = 256  # outcomes sent to the inbox in one statement, at most


def default_worker_id(pool: str) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{pool}"


@dataclass
class WorkerConfig:
    pool: str = "default"
    concurrency: int = 2
    lease_s: float = 30.0
    heartbeat_s: float | None = None  # default: a third of the lease
    poll_s: float = 0.5
    worker_id: str = ""

    def heartbeat_interval(self) -> float:
        return self.heartbeat_s if self.heartbeat_s is not None else self.lease_s / 3


@dataclass
class _InFlight:
    lease: Lease
    lost: bool = False
    waits: bool = False  # its tool waits for other tasks: outside the claim window


@dataclass
class _Report:
    """An outcome on its way to the inbox; `sent` is set once it was sent (or given up)."""

    lease: Lease
    outcome: Outcome
    accepted: bool | None = None
    sent: threading.Event = field(default_factory=threading.Event)


@dataclass
class WorkerStats:
    completed: int = 0
    continued: int = 0  # outcomes decided here (the continuation path)
    rejected: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)


class Worker:
    """Runs tasks of one pool until stopped or drained."""

    def __init__(
        self,
        store: Store,
        tools: ToolRegistry,
        config: WorkerConfig,
        *,
        decider: Decider | None = None,
        observer: Observer = NOOP,
    ) -> None:
        self.store = store
        self.tools = tools
        self.config = config
        self.decider = decider
        self.observer = observer
        self.worker_id = config.worker_id or default_worker_id(config.pool)
        self.workloads = Workloads(lambda execution_id: stored_workload(store, execution_id))
        self.stats = WorkerStats()
        self._in_flight: dict[str, _InFlight] = {}
        self._lock = threading.Lock()
        self._draining = threading.Event()
        self._stopped = threading.Event()
        self._stripes = [threading.Lock() for _ in range(64)]
        self._reports: queue.SimpleQueue[_Report | None] | None = None
        self._executor = ThreadPoolExecutor(
            max_workers=config.concurrency, thread_name_prefix="noetl-task"
        )
        self._waiters: set[threading.Thread] = set()
        self._should_stop: Callable[[], bool] = lambda: False

    # --- control -------------------------------------------------------------------------

    def drain(self) -> None:
        """Stop taking tasks; `run` returns once the tasks in flight are finished."""
        if not self._draining.is_set():
            log.info("worker %s draining", self.worker_id)
        self._draining.set()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def busy(self) -> int:
        """Tasks in flight that count against the claim window (not the waiting ones)."""
        with self._lock:
            return sum(1 for entry in self._in_flight.values() if not entry.waits)

    # --- the loop ------------------------------------------------------------------------

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> WorkerStats:
        """Claim and run tasks until `should_stop()` or a drain finishes."""
        started = time.time()
        self._should_stop = should_stop
        self._register("running", started)
        self.observer.heartbeat(self.worker_id, self.config.pool, started)
        beat = threading.Thread(target=self._heartbeats, name="noetl-heartbeat", daemon=True)
        beat.start()
        reports: queue.SimpleQueue[_Report | None] = queue.SimpleQueue()
        reporter = threading.Thread(
            target=self._reporter, args=(reports,), name="noetl-reporter", daemon=True
        )
        reporter.start()
        self._reports = reports
        try:
            while not should_stop():
                if self.draining:
                    if self.in_flight() == 0:
                        break
                    time.sleep(0.05)
                    continue
                if not self._claim_some():
                    self._wait()
        finally:
            self._executor.shutdown(wait=True)
            with self._lock:
                waiters = list(self._waiters)
            for thread in waiters:
                thread.join(timeout=max(self.config.lease_s, 5.0))
            self._reports = None
            reports.put(None)
            reporter.join(timeout=max(self.config.lease_s, 5.0) + 5)
            self._stopped.set()
            beat.join(timeout=5)
            try:
                self._register("stopped", started)
            except NoetlError as exc:
                log.warning("could not record the worker as stopped: %s", exc)
        log.info("worker %s stopped: %s", self.worker_id, self.stats)
        return self.stats

    def _register(self, status: str, started: float) -> None:
        self.store.register_worker(
            WorkerRecord(
                worker_id=self.worker_id,
                pool=self.config.pool,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                status=status,
                started_at=started,
                heartbeat_at=time.time(),
            )
        )

    def _claim_some(self) -> bool:
        free = self.config.concurrency - self.busy()
        if free <= 0:
            time.sleep(0.005)
            return True
        try:
            leases = self.store.claim(
                self.worker_id, pool=self.config.pool, limit=free, lease_s=self.config.lease_s
            )
        except NoetlError as exc:  # the database is away: wait and try again
            log.warning("claim failed: %s", exc)
            time.sleep(self.config.poll_s)
            return False
        for lease in leases:
            with self._lock:
                self._in_flight[lease.task.task_id] = self._entry(lease)
            self.observer.claimed(lease.task, _queued_s(lease, self.config.lease_s))
            self._submit(lease)
        return bool(leases)

    def _entry(self, lease: Lease) -> _InFlight:
        return _InFlight(lease, waits=self.tools.waits(lease.task.kind))

    def _submit(self, lease: Lease) -> None:
        """Run a leased task: in the pool, or in a thread of its own when its tool waits
        for other tasks (a pool slot held while waiting could be the one they need)."""
        if not self.tools.waits(lease.task.kind):
            self._executor.submit(self._execute, lease)
            return
        thread = threading.Thread(
            target=self._execute_waiting,
            args=(lease,),
            name=f"noetl-wait-{lease.task.task_id}",
            daemon=True,
        )
        with self._lock:
            self._waiters.add(thread)
        thread.start()

    def _execute_waiting(self, lease: Lease) -> None:
        try:
            self._execute(lease)
        finally:
            with self._lock:
                self._waiters.discard(threading.current_thread())

    def _wait(self) -> None:
        try:
            self.store.wait_for("tasks", self.config.poll_s)
        except NoetlError:
            time.sleep(self.config.poll_s)

    # --- one task ------------------------------------------------------------------------

    def _execute(self, lease: Lease) -> None:
        """Run a task, then the tasks its continuation leased to this worker (the first in
        this thread unless its tool waits, the others through `_submit`)."""
        current: Lease | None = lease
        while current is not None:
            follow = self._run(current)
            current = None
            if follow and not self.tools.waits(follow[0].task.kind):
                current, follow = follow[0], follow[1:]
            for extra in follow:
                self._submit(extra)

    def _run(self, lease: Lease) -> list[Lease]:
        task = lease.task
        try:
            # Tasks do not carry the workload: it is read once per execution from its log.
            outcome = self.tools.run(self.workloads.attach(task))
        except Exception as exc:  # the registry already guards; this is the last line
            outcome = Outcome(
                task.task_id,
                ok=False,
                error=str(exc),
                error_type=type(exc).__name__,
                retryable=getattr(exc, "retryable", False) is True,
            )
        with self._lock:
            entry = self._in_flight.get(task.task_id)
            lost = entry.lost if entry else True
        if entry is not None and entry.waits and self._should_stop():
            # A hard stop ended its wait (a drain waits for it): not reported, the lease
            # expires, and the task, run again, finds the child it started.
            lost = True
        follow: list[Lease] = []
        if not lost:
            follow = self._report(lease, outcome)
        else:
            self.stats.lost += 1
            self.observer.reported(task, outcome, "lost")
        with self._lock:
            self._in_flight.pop(task.task_id, None)
            for nxt in follow:
                self._in_flight[nxt.task.task_id] = self._entry(nxt)
        for nxt in follow:  # leased in the transaction that queued them: no wait
            self.observer.claimed(nxt.task, 0.0)
        return follow

    def _report(self, lease: Lease, outcome: Outcome) -> list[Lease]:
        """Report the outcome: by deciding its continuation here when that applies (the
        leases it returns are this worker's next tasks), else through the inbox."""
        if self.decider is not None and outcome.ok and lease.solo:
            execution_id = lease.task.execution_id
            # One thread at a time decides for an execution: they share its cached state.
            with self._stripes[hash(execution_id) % len(self._stripes)]:
                try:
                    follow = self._continue(lease, outcome, self.decider)
                except ConcurrencyError:
                    self.decider.forget(execution_id)
                    follow = None
                except Exception as exc:
                    # The database is away, or the playbook cannot be loaded: the inbox
                    # path retries and reports with the full error handling of the server.
                    log.warning(
                        "continuing %s failed (%s); reporting it instead",
                        lease.task.task_id,
                        exc,
                        exc_info=not isinstance(exc, NoetlError),
                    )
                    self.decider.forget(execution_id)
                    follow = None
            if follow is not None:
                return follow
        self._complete(lease, outcome)
        return []

    def _continue(self, lease: Lease, outcome: Outcome, decider: Decider) -> list[Lease] | None:
        """Decide and commit what follows a successful task that was the only one in flight
        of its execution; None when that does not apply (the outcome goes to the inbox)."""
        task = lease.task
        cached = decider.load(task.execution_id)
        if cached is None:
            return None
        state = cached.state
        if task.task_id not in state.tasks and not decider.catch_up(cached):
            return None
        if state.terminal or len(state.tasks) != 1 or task.task_id not in state.tasks:
            return None
        now = time.time()
        before = state.seq
        event = Event(
            0, EventType.TOOL_PROCESSED, task.execution_id, now, None, outcome.to_payload()
        )
        decision = cached.engine.decide(state, event, now)
        append = decider.append(
            state, before=before, events=decision.events, commands=decision.commands, now=now
        )
        own = 0 if self.tools.waits(task.kind) else 1  # this task's slot is free again
        free = 0 if self.draining else self.config.concurrency - self.busy() + own
        lease_ids = [item.task.task_id for item in append.enqueue][: max(free, 0)]
        leases = self.store.complete_and_commit(
            task.task_id,
            lease.token,
            append,
            worker_id=self.worker_id,
            lease=lease_ids,
            lease_s=self.config.lease_s,
        )
        if leases is None:
            decider.forget(task.execution_id)  # its state holds a decision not written
            self.stats.rejected += 1
            log.info("result of %s refused: lease no longer held", task.task_id)
            self.observer.reported(task, outcome, "refused")
            return []
        decider.committed([append])
        self.observer.reported(task, outcome, "continued")
        self.stats.continued += 1
        if state.terminal:
            decider.forget(task.execution_id)  # finished: nothing more to decide for it
        return leases

    def _complete(self, lease: Lease, outcome: Outcome) -> None:
        """Report the outcome to the inbox with the lease's token: through the reporter
        thread while the worker runs (reports that wait meanwhile go in one statement),
        directly otherwise."""
        report = _Report(lease, outcome)
        if self._reports is not None:
            self._reports.put(report)
            report.sent.wait()
        else:
            self._send([report])
        if report.accepted is None:
            return
        self.observer.reported(lease.task, outcome, "inbox" if report.accepted else "refused")
        if report.accepted:
            self.stats.completed += 1
        else:
            self.stats.rejected += 1
            log.info("result of %s refused: lease no longer held", lease.task.task_id)

    def _reporter(self, reports: queue.SimpleQueue[_Report | None]) -> None:
        """Send the reports waiting in the queue, together, until told to stop (None)."""
        stopping = False
        while not stopping:
            first = reports.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < REPORT_BATCH:
                try:
                    item = reports.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            self._send(batch)

    def _send(self, batch: list[_Report]) -> None:
        """One `complete_many` for the batch, retried while the database is away (up to a
        lease's length); every report is marked sent, accepted True/False or None."""
        deadline = time.monotonic() + max(self.config.lease_s, 5.0)
        delay = 0.1
        items = [(r.lease.task.task_id, r.lease.token, r.outcome.to_payload()) for r in batch]
        try:
            while True:
                try:
                    accepted = self.store.complete_many(items)
                    break
                except NoetlError as exc:
                    if time.monotonic() > deadline:
                        log.error("could not report %d outcomes: %s", len(batch), exc)
                        self.stats.errors.append(str(exc))
                        return
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0)
            for report in batch:
                report.accepted = report.lease.task.task_id in accepted
        finally:
            for report in batch:
                report.sent.set()

    # --- heartbeats ----------------------------------------------------------------------

    def _heartbeats(self) -> None:
        interval = self.config.heartbeat_interval()
        while not self._stopped.wait(interval):
            self._beat_once()

    def _beat_once(self) -> None:
        with self._lock:
            entries = list(self._in_flight.values())
        for entry in entries:
            try:
                answer = self.store.heartbeat(
                    entry.lease.task.task_id, entry.lease.token, lease_s=self.config.lease_s
                )
            except NoetlError as exc:
                log.warning("heartbeat failed: %s", exc)
                continue
            # The execution was canceled: stop the running code (an inline python task's
            # child is killed); the failed outcome is reported as usual and the engine
            # discards it. Asked again at every beat until the task ends, in case it had
            # not reached its tool yet.
            if answer.cancel and self.tools.cancel(entry.lease.task.task_id):
                log.info("canceled running task %s", entry.lease.task.task_id)
            if not answer.alive:
                entry.lost = True
        try:
            status = self.store.worker_heartbeat(self.worker_id)
        except NoetlError as exc:
            log.warning("worker heartbeat failed: %s", exc)
            return
        self.observer.heartbeat(self.worker_id, self.config.pool, time.time())
        if status == "draining":
            self.drain()


def _queued_s(lease: Lease, lease_s: float) -> float | None:
    """How long the task waited between becoming due and being claimed (database clock:
    the claim time is the lease's expiry less its length)."""
    if lease.ready_at is None:
        return None
    return lease.expires_at - lease_s - lease.ready_at
