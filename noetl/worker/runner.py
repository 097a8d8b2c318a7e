"""The worker of distributed mode: lease tasks from the store, run tools, report outcomes.

A worker claims tasks (`FOR UPDATE SKIP LOCKED` on PostgreSQL), keeps their leases alive
with heartbeats, runs each tool, and reports the outcome quoting its fencing token; a
result with a stale token (the lease expired and the task went to someone else) is refused
by the store and changes nothing.

Reporting takes the inbox or the continuation (`noetl.worker.report_paths`). Short
python tasks claimed together run in one thread with one round trip to a python child,
and are reported together (`noetl.worker.ahead`).

Draining (`noetl worker drain`, or SIGTERM): stop claiming, finish what is in flight, exit.

A scoped worker (`scope`: the executions it may take tasks of, asked before each claim),
as a command working for one execution on a shared database runs, takes no other's task.
A hard stop (`should_stop()`, a second SIGTERM): hand the tasks in flight back to the queue
at once (`Store.release`: another worker can claim them right away), stop their tools
(an inline python task's child is killed), and exit without waiting for them.

Nothing the worker depends on may die silently while its heartbeat keeps leases alive: a
failure in reporting a task fails that task (`noetl.worker.reporting`), a failure in the
claim loop is logged and the loop goes on, and a reporter or heartbeat thread that died
is started again by the claim loop (which stops the worker, handing its tasks back, if it
cannot).

Tasks whose tool waits for other tasks (`playbook`) run in threads of their own
(`noetl.worker._threads`), outside the claim window, heartbeaten like any task. On a hard
stop their outcomes are dropped: the task is handed back and, run again, finds the child
it started.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Sequence

from noetl.bus import TaskBus
from noetl.core import Outcome, Task
from noetl.decision.decider import Decider
from noetl.decision.workloads import Workloads, stored_workload
from noetl.errors import NoetlError
from noetl.observability import NOOP, Observer, ReportPath
from noetl.store.base import Lease, Store, WorkerRecord
from noetl.worker._threads import TaskThreads
from noetl.worker.ahead import AHEAD_CLAIMED, EarlyStart, Pace, pool_of, run_ahead, sendable
from noetl.worker.chain import Chain
from noetl.worker.config import WorkerConfig, WorkerStats, default_worker_id
from noetl.worker.continuation import continuation_for, may_continue
from noetl.worker.heartbeats import Heartbeats
from noetl.worker.in_flight import InFlightTable
from noetl.worker.report_paths import ReportPaths
from noetl.worker.reporting import Reporter, tool_error, worker_failure
from noetl.worker.tools import ToolRegistry

__all__ = ["Worker", "WorkerConfig", "WorkerStats", "default_worker_id"]

log = logging.getLogger("noetl.worker")
# How long a hard stop waits for the reports already queued (results of tasks that
# finished before it) to be sent.
HARD_STOP_REPORT_S = 3.0


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
        scope: Callable[[], Collection[str]] | None = None,
        bus: TaskBus | None = None,
    ) -> None:
        self.store = store
        # Announcements of new tasks (`noetl.bus`); while it is away, database wake-ups.
        self.bus = bus
        self.tools = tools
        self.config = config
        self.decider = decider
        self.observer = observer
        # The executions this worker may take tasks of, asked before each claim (None: any).
        self.scope = scope
        self.worker_id = config.worker_id or default_worker_id(config.pool)
        self.workloads = Workloads(lambda execution_id: stored_workload(store, execution_id))
        self.stats = WorkerStats()
        self._in_flight = InFlightTable(tools.waits)
        self._draining = threading.Event()
        self._hard_stop = threading.Event()
        # Short python tasks claimed together go to a child together (`_groups`).
        self._pool = pool_of(tools)
        self._pace = Pace()
        self._early = (
            None
            if self._pool is None
            else EarlyStart(self._pool, self._pace, self.workloads, self._hard_stop.is_set)
        )
        self._continuation = continuation_for(
            decider,
            store,
            config,
            worker_id=self.worker_id,
            held=lambda task_id: self._in_flight.get(task_id) is not None,
            early=self._early,
            chain=lambda: Chain(
                tools,
                self._pace,
                self.workloads,
                self._hard_stop.is_set,
                observer,
                steps=config.chain_steps,
                budget_s=config.chain_ms / 1000,
            ),
        )
        self._chain = None if self._continuation is None else self._continuation.chain
        self._reporter = Reporter(
            store, give_up_s=max(config.lease_s, 5.0), errors=self.stats.errors
        )
        self._paths = ReportPaths(self._reporter, self._continuation, observer)
        self._threads = TaskThreads(config.concurrency)
        self._heartbeats = Heartbeats(
            store,
            worker_id=self.worker_id,
            pool=config.pool,
            lease_s=config.lease_s,
            interval=config.heartbeat_interval(),
            held=self._in_flight.entries,
            cancel=tools.cancel,
            drain=self.drain,
            observer=observer,
        )
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
        return len(self._in_flight)

    def busy(self) -> int:
        """Tasks in flight that count against the claim window (not the waiting ones)."""
        return self._in_flight.busy()

    # --- the loop ------------------------------------------------------------------------

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> WorkerStats:
        """Claim and run tasks until a drain finishes, or `should_stop()` (a hard stop:
        the tasks in flight go back to the queue at once)."""
        started = time.time()
        self._should_stop = should_stop
        self._register("running", started)
        self.observer.heartbeat(self.worker_id, self.config.pool, started)
        self._heartbeats.start()
        self._reporter.start()
        drained = False
        try:
            while not should_stop():
                if not self._supervise():
                    break
                if self.draining:
                    if self.in_flight() == 0:
                        drained = True
                        break
                    time.sleep(0.05)
                    continue
                try:
                    if not self._claim_some():
                        self._wait()
                except Exception:  # a bug must not end the loop (its tasks stay tracked)
                    log.exception("the claim loop failed; going on")
                    time.sleep(self.config.poll_s)
        finally:
            if not drained:
                self._abandon()
            self._shut_down(drained)
            try:
                self._register("stopped", started)
            except NoetlError as exc:
                log.warning("could not record the worker as stopped: %s", exc)
        log.info("worker %s stopped: %s", self.worker_id, self.stats)
        return self.stats

    def _shut_down(self, drained: bool) -> None:
        """Stop the threads: after a drain once their work is done; after a hard stop
        without waiting for the tools still running (their tasks were handed back)."""
        self._threads.shutdown(wait=drained)
        if drained:
            self._threads.join_own(timeout=max(self.config.lease_s, 5.0))
        self._reporter.stop(max(self.config.lease_s, 5.0) + 5 if drained else HARD_STOP_REPORT_S)
        self._heartbeats.stop(timeout=5)

    def _supervise(self) -> bool:
        """Start the reporter or the heartbeat thread again if one died; False (the worker
        stops, handing its tasks back) when a thread cannot be started."""
        try:
            self._reporter.ensure_running()
            self._heartbeats.ensure_running()
        except RuntimeError as exc:  # "can't start new thread"
            self.stats.failure = f"a worker thread could not be started again: {exc}"
            log.error("worker %s stops: %s", self.worker_id, self.stats.failure)
            return False
        return True

    def abandon(self) -> None:
        """Stop at once from another thread (as `should_stop` would, without waiting for
        the loop to notice): the tasks in flight go back to the queue, their tools are
        told to stop, and their outcomes are dropped."""
        self._abandon()

    def _abandon(self) -> None:
        """A hard stop: the tasks in flight go back to the queue now (their outcomes will
        not be reported), and their tools are told to stop."""
        entries = self._in_flight.abandon(self._hard_stop.set)
        if not entries:
            return
        self._release([entry.lease for entry in entries])
        for entry in entries:
            self.tools.cancel(entry.lease.task.task_id)

    def _release(self, leases: Sequence[Lease]) -> None:
        held = [(lease.task.task_id, lease.token) for lease in leases]
        try:
            released = self.store.release(held)
        except Exception as exc:  # the leases expire instead
            log.warning("could not hand %d task(s) back to the queue: %s", len(held), exc)
            return
        self.stats.released += len(released)
        log.info("worker %s handed %d task(s) back to the queue", self.worker_id, len(released))

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
            executions = None if self.scope is None else self.scope()
            leases = self.store.claim(
                self.worker_id,
                pool=self.config.pool,
                limit=free,
                lease_s=self.config.lease_s,
                executions=executions,
            )
        except NoetlError as exc:  # the database is away: wait and try again
            log.warning("claim failed: %s", exc)
            time.sleep(self.config.poll_s)
            return False
        self._in_flight.track(leases)
        if self._continuation is not None:  # their states, read together
            self._continuation.prime_many({x.task.execution_id for x in leases if self._primes(x)})
        for lease in leases:
            try:
                self.observer.claimed(lease.task, lease.queued_s(self.config.lease_s))
            except Exception:
                log.exception("observing the claim of %s failed", lease.task.task_id)
        for group in self._groups(leases):
            self._launch(group)
        return bool(leases)

    def _groups(self, leases: list[Lease]) -> list[list[Lease]]:
        """The leases one by one, but short python tasks that are not to be continued
        (`may_continue`: loop items) in batches of up to AHEAD_CLAIMED: one thread and one
        round trip to a child each (`noetl.worker.ahead`). The others run in threads of
        their own: their continuations, decided one by one, commit together
        (`Continuation`); solo tasks in one thread ran at 0.87x."""
        if self._pool is None or len(leases) < 2 or not self._pace.short:
            return [[lease] for lease in leases]
        alone = [may_continue(lease) or not sendable(lease.task) for lease in leases]
        ahead = [lease for lease, one in zip(leases, alone, strict=True) if not one]
        groups = [[lease] for lease, one in zip(leases, alone, strict=True) if one]
        groups += [ahead[n : n + AHEAD_CLAIMED] for n in range(0, len(ahead), AHEAD_CLAIMED)]
        return groups

    def _launch(self, leases: list[Lease]) -> None:
        """Run tasks this worker tracks: one, or a batch (`_groups`) in one thread. A task
        that cannot be started is reported failed (retryable: another worker may have the
        threads this one lacks)."""
        try:
            if len(leases) == 1:
                self._submit(leases[0])
            else:
                self._threads.submit(self._execute_group, leases)
        except Exception as exc:
            log.exception("could not start %d task(s)", len(leases))
            for lease in leases:
                try:
                    self._complete(lease, worker_failure(lease.task.task_id, exc, started=False))
                finally:
                    self._in_flight.drop([lease])

    def _submit(self, lease: Lease) -> None:
        """Run a leased task: in the pool, or in a thread of its own when its tool waits
        for other tasks (noetl.worker._threads)."""
        if self.tools.waits(lease.task.kind):
            self._threads.spawn(self._execute, lease, name=f"noetl-wait-{lease.task.task_id}")
        else:
            self._threads.submit(self._execute, lease)

    def _wait(self) -> None:
        if self.bus is not None and self.bus.wait(self.config.pool, self.config.poll_s) is not None:
            return
        try:
            self.store.wait_for("tasks", self.config.poll_s)
        except NoetlError:
            time.sleep(self.config.poll_s)

    # --- one task ------------------------------------------------------------------------

    def _execute(self, lease: Lease) -> None:
        """Run a task, then the tasks its continuation leased to this worker (in this
        thread unless their tool waits, the others through `_launch`)."""
        self._go_on(self._run(lease))

    def _go_on(self, follow: list[Lease]) -> None:
        """Run the tasks continuations leased to this worker: the first of them (or the
        first batch, `_groups`) in this thread unless its tool waits, the others through
        `_launch`."""
        while follow:
            groups = self._groups(follow)
            here = [] if self.tools.waits(groups[0][0].task.kind) else groups.pop(0)
            for group in groups:
                self._launch(group)
            if len(here) > 1:
                self._execute_group(here)  # reported to the inbox: nothing follows here
                return
            follow = self._run(here[0]) if here else []

    def _run(self, lease: Lease) -> list[Lease]:
        """Run one task and report it; never raises. Returns the tasks its continuation
        leased to this worker (now tracked as in flight)."""
        task = lease.task
        follow: list[Lease] = []
        try:
            if not self._hard_stop.is_set():  # else it was handed back: do not start it
                follow = self._run_and_report(lease)
        except Exception as exc:  # a bug past the tool's own guards: fail the task
            log.exception("running or reporting %s failed", task.task_id)
            follow = []
            self._failed_run(lease, exc)
        finally:
            # Never left tracked (and heartbeaten) once its thread is done with it.
            orphans = self._in_flight.hand_over([lease], follow, self._hard_stop.is_set)
            if self._early is not None:  # started early (`EarlyStart`) but not run here
                for stopped in [lease, *orphans]:
                    self._early.forget(stopped.task)
        if orphans:  # leased to this worker as it stopped: straight back to the queue
            self._release(orphans)
            return []
        for nxt in follow:  # leased in the transaction that queued them: no wait
            try:
                self.observer.claimed(nxt.task, 0.0)
            except Exception:
                log.exception("observing the claim of %s failed", nxt.task.task_id)
        return follow

    def _run_and_report(self, lease: Lease) -> list[Lease]:
        task = lease.task
        if self._primes(lease):
            self._prime(task.execution_id)
        # Tasks do not carry the workload: it is read once per execution from its log.
        outcome = self._outcome(lease, self.workloads.attach(task))
        return [] if outcome is None else self._report(lease, outcome)

    def _execute_group(self, leases: list[Lease]) -> None:
        """Run a batch of short python tasks (`_groups`) with one round trip to a child,
        then report their outcomes together (none may be continued: they take the inbox)."""
        assert self._pool is not None
        tasks: list[Task] = []
        ended: set[str] = set()  # reported, or not to be
        try:  # the workloads may need a read of the store
            tasks = [self.workloads.attach(lease.task) for lease in leases]
            if not self._hard_stop.is_set():
                run_ahead(self._pool, tasks)
            done: list[tuple[Lease, Outcome]] = []
            for lease, task in zip(leases, tasks, strict=True):
                if not self._hard_stop.is_set():  # else it was handed back: not started
                    outcome = self._outcome(lease, task)
                    if outcome is not None:
                        done.append((lease, outcome))
                        continue
                ended.add(task.task_id)
            for path in self._paths.complete_many(done):
                self._count(path)
            ended.update(task.task_id for task in tasks)
        except Exception as exc:  # a bug past the tools' own guards: fail the rest
            log.exception("running or reporting %d tasks failed", len(leases))
            for lease in leases:
                if lease.task.task_id not in ended:
                    self._failed_run(lease, exc)
        finally:
            self._pool.forget_ahead(tasks)
            self._in_flight.drop(leases)

    def _failed_run(self, lease: Lease, exc: Exception) -> None:
        """Report a task failed by a bug past the tool's guards (never raises)."""
        try:
            self._complete(lease, worker_failure(lease.task.task_id, exc, started=True))
        except Exception:
            log.exception("could not report the failure of %s", lease.task.task_id)

    def _outcome(self, lease: Lease, task: Task) -> Outcome | None:
        """Run the task's tool; None when its outcome is not to be reported (the task was
        handed back meanwhile)."""
        try:  # a task a chain ran already (and failed) is reported, not run again
            held = None if self._chain is None else self._chain.take(lease)
            outcome = self.tools.run(task) if held is None else held
        except Exception as exc:  # the registry already guards; this is the last line
            outcome = tool_error(task.task_id, exc)
        entry = self._in_flight.get(task.task_id)
        lost = entry.lost if entry else True
        if entry is not None and entry.waits and self._should_stop() and not lost:
            # A hard stop ended its wait (a drain waits for it): not reported, the task is
            # handed back (here, should the stop not have seen it yet), and, run again,
            # finds the child it started.
            self._release([lease])
            lost = True
        if lost:
            self.stats.lost += 1
            self.observer.reported(task, outcome, "lost")
            return None
        self._pace.observe(task, outcome)
        return outcome

    def _primes(self, lease: Lease) -> bool:
        """Whether `_prime` loads the state of `lease`'s execution before its task runs."""
        task = lease.task
        return (
            self._continuation is not None
            and may_continue(lease)
            and "workload" not in task.context
            and not self.workloads.known(task.execution_id)
        )

    def _prime(self, execution_id: str) -> None:
        """The continuation of a task that may be continued (`may_continue`) will load its
        execution's state: loaded now, its workload comes with it (one read of the log
        fewer per execution)."""
        assert self._continuation is not None
        workload = self._continuation.prime(execution_id)
        if workload is not None:
            self.workloads.offer(execution_id, workload)

    def _report(self, lease: Lease, outcome: Outcome) -> list[Lease]:
        """Report the outcome (noetl.worker.report_paths); the leases its continuation
        returned are this worker's next tasks."""
        path, leases, chained = self._paths.report(
            lease, outcome, lambda: self._free_after(lease.task)
        )
        self._count(path)
        self.stats.continued += chained
        return leases

    def _complete(self, lease: Lease, outcome: Outcome) -> None:
        """Report the outcome to the inbox."""
        self._count(self._paths.complete(lease, outcome))

    def _count(self, path: ReportPath | None) -> None:
        if path == "inbox":
            self.stats.completed += 1
        elif path == "continued":
            self.stats.continued += 1
        elif path == "refused":
            self.stats.rejected += 1

    def _free_after(self, task: Task) -> int:
        """Task slots free once `task` is done (none while stopping)."""
        if self.draining or self._hard_stop.is_set():
            return 0
        own = 0 if self.tools.waits(task.kind) else 1  # this task's slot is free again
        return self.config.concurrency - self.busy() + own
