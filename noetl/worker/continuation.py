"""The continuation: a worker decides what follows a successful task it ran.

A task that was the only one in flight of its execution (`Lease.solo`), or one whose
execution's tasks in flight are all held by this worker, is decided right where it ran,
by the same engine against the same log, and committed in ONE transaction with the
task's completion, under the expected sequence number; the tasks that decision
dispatches are leased to this worker in that transaction. The continuations of other
executions that end while one commits go together in the next transaction
(`Store.continue_many`, through a `GroupCommit`). If the execution moved meanwhile (a
cancel, another server), or anything else goes wrong, nothing is written and the outcome
takes the inbox path (`None`), where a server decides with its full error handling.
The one task a continuation leases this worker may start in a python child while its
commit is sent (`noetl.worker.ahead.EarlyStart`); it is stopped if the commit fails.
Or, when it is a short python step, the continuation runs it at once and decides on it
too, and commits the whole chain in one transaction (`noetl.worker.chain`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from noetl.core import ConcurrencyError, Event, EventType, Outcome, Task
from noetl.decision.appends import chain_appends, plain
from noetl.decision.decider import Cached, Decider
from noetl.decision.group_commit import GroupCommit
from noetl.errors import NoetlError
from noetl.store.base import Append, Completed, Completion, Lease, Store
from noetl.worker.ahead import EarlyStart
from noetl.worker.chain import Chain, Overran
from noetl.worker.config import WorkerConfig

log = logging.getLogger("noetl.worker")
STRIPES = 4096
# `prime_many` reads executions of at most this many events together (a young one: its
# first tasks); a longer log is read by `prime`, one by one.
PRIME_EVENTS = 64


@dataclass(frozen=True, slots=True)
class Continued:
    """What a continuation did: committed, with this worker's next tasks (`leases`) and
    the tasks it ran in a chain and committed with it (`chained`, `noetl.worker.chain`),
    or `refused` (the task's lease was no longer held; nothing was written)."""

    leases: list[Lease]
    refused: bool = False
    chained: tuple[tuple[Task, Outcome], ...] = ()


def continuation_for(
    decider: Decider | None,
    store: Store,
    config: WorkerConfig,
    *,
    worker_id: str,
    held: Callable[[str], bool],
    early: EarlyStart | None,
    chain: Callable[[], Chain],
) -> Continuation | None:
    """A worker's continuation (None without a decider: the worker reports every outcome
    through the inbox), with a chain (`chain()`) unless `config.chain_steps` is 0."""
    if decider is None:
        return None
    return Continuation(
        decider,
        store,
        worker_id=worker_id,
        lease_s=config.lease_s,
        held=held,
        early=early,
        chain=chain() if config.chain_steps > 0 else None,
    )


def may_continue(lease: Lease) -> bool:
    """Whether the worker tries to decide what follows the task: a solo one, or one that
    is not a loop item (parallel branches the same decision dispatched, which this worker
    may hold all of). Loop items take the inbox: their siblings are spread over workers."""
    return lease.solo or lease.task.index is None


class Continuation:
    """Decides and commits what follows the tasks it may (`may_continue`), for one worker.

    `held(task_id)`: whether this worker holds that task. A task is continued when every
    task in flight of its execution is one this worker holds (it alone, for a solo task):
    no other worker's outcome can be decided meanwhile, and what a server decides (a
    cancel, a timer) makes the commit fail on its sequence."""

    def __init__(
        self,
        decider: Decider,
        store: Store,
        *,
        worker_id: str,
        lease_s: float,
        held: Callable[[str], bool] = lambda task_id: False,
        early: EarlyStart | None = None,
        chain: Chain | None = None,
    ) -> None:
        self.decider = decider
        self.early = early
        self.chain = chain
        self.held = held
        self.store = store
        self.worker_id = worker_id
        self.lease_s = lease_s
        # One thread at a time decides for an execution. A chain holds its stripe while it
        # runs its steps: enough stripes that other executions' threads seldom share it.
        self._stripes = [threading.Lock() for _ in range(STRIPES)]
        # Continuations that end while one commits go together in the next commit.
        self.commits: GroupCommit[Completion, Completed] = GroupCommit(self._commit_many)

    def _commit_many(self, items: list[Completion]) -> list[Completed]:
        return self.store.continue_many(items, worker_id=self.worker_id, lease_s=self.lease_s)

    def prime(self, execution_id: str) -> dict[str, Any] | None:
        """Load the execution's state for the continuation of a task before it runs
        (it is then cached), and return its workload: the task's tool needs it, and it
        is in the state folded from the log, so it costs no read of its own. None when it
        cannot be loaded (the worker reads the workload itself then)."""
        with self._stripes[hash(execution_id) % len(self._stripes)]:
            try:
                cached = self.decider.load(execution_id)
            except Exception as exc:  # the continuation tries again, or reports
                log.debug("could not load %s ahead of its task: %s", execution_id, exc)
                return None
        if cached is None or cached.state.seq == 0:
            return None
        return dict(cached.state.workload)

    def prime_many(self, execution_ids: Collection[str]) -> None:
        """Load the states of the executions whose tasks a claim just leased, in one read
        when there are several (`Decider.load_many`); `prime` then finds them cached.
        Those it leaves out (a longer log, or the read failed) `prime` loads itself."""
        if len(execution_ids) < 2:
            return
        try:
            self.decider.load_many(execution_ids, max_events=PRIME_EVENTS)
        except Exception as exc:  # each task's own `prime` reads it then
            log.debug("could not load %d executions at once: %s", len(execution_ids), exc)

    def attempt(self, lease: Lease, outcome: Outcome, free: Callable[[], int]) -> Continued | None:
        """Continue the execution of `lease`'s task with its successful `outcome`, leasing
        at most `free()` of the tasks it dispatches to this worker; None when that does not
        apply or failed (report through the inbox then)."""
        execution_id = lease.task.execution_id
        # One thread at a time decides for an execution: they share its cached state.
        with self._stripes[hash(execution_id) % len(self._stripes)]:
            try:
                return self._continue(lease, outcome, free)
            except ConcurrencyError:
                self.decider.forget(execution_id)
                return None
            except Exception as exc:
                # The database is away, the playbook cannot be loaded, a value the store
                # refuses: the inbox path retries and reports with the server's handling.
                log.warning(
                    "continuing %s failed (%s); reporting it instead",
                    lease.task.task_id,
                    exc,
                    exc_info=not isinstance(exc, NoetlError | ValueError),
                )
                self.decider.forget(execution_id)
                return None

    def _continue(
        self, lease: Lease, outcome: Outcome, free: Callable[[], int]
    ) -> Continued | None:
        task = lease.task
        decider = self.decider
        cached = decider.load(task.execution_id)
        if cached is None:
            return None
        state = cached.state
        if task.task_id not in state.tasks and not decider.catch_up(cached):
            return None
        if state.terminal or task.task_id not in state.tasks:
            return None
        if any(other != task.task_id and not self.held(other) for other in state.tasks):
            return None  # another worker's task is in flight: its outcome may come first
        append, run = self._run_chain(cached, task, outcome, free)
        sent = run.running
        if sent is None and run.failed is None:
            sent = self._start_early(append, run.lease_ids)
        leases: Completed = None
        try:
            leases = self.commits.submit(
                Completion(task.task_id, lease.token, append, run.lease_ids)
            )
        finally:
            if sent is not None and not _leases(leases, sent):
                self._forget(sent)  # not leased here after all: stopped
        if isinstance(leases, Exception):
            raise leases  # `attempt` forgets the state: the outcome takes the inbox path
        if leases is None:
            decider.forget(task.execution_id)  # its state holds a decision not written
            return Continued([], refused=True)
        if run.failed is not None:
            self._hold(leases, *run.failed)
        done = Continued(leases, chained=tuple(run.chained))
        try:
            decider.committed([append])
        except Exception:  # committed: the leases it returned must still be run
            log.exception("after continuing %s", task.task_id)
            decider.forget(task.execution_id)
            return done
        if state.terminal:
            decider.forget(task.execution_id)  # finished: nothing more to decide for it
        return done

    def _run_chain(
        self, cached: Cached, task: Task, outcome: Outcome, free: Callable[[], int]
    ) -> tuple[Append, _Run]:
        """Decide on `outcome`, then run and decide on the tasks the chain may take
        (`_chainable`), up to the first that fails (kept in `failed`: leased to this
        worker, it reports that outcome) or runs past the chain's time (`running`: leased
        to this worker, whose run takes its reply). One append for all those decisions,
        and the rest of what was done (`_Run`)."""
        run = _Run()
        appends: list[Append] = []
        began = time.monotonic()
        while True:
            if self.chain is not None:
                self.chain.observe(cached.engine, task, outcome)
            append = self._decide(cached, task, outcome)
            appends.append(append)
            # Only its own pool's tasks: a `sinks` task waits for the pool it was queued in.
            mine = [item.task.task_id for item in append.enqueue if item.pool == self.decider.pool]
            run.lease_ids = mine[: max(free(), 0)]
            nxt = self._chainable(cached, append, run.lease_ids, len(run.chained), began)
            if nxt is None:
                break
            assert self.chain is not None
            ran = self.chain.run(
                cached.engine, nxt, self.chain.budget_s - (time.monotonic() - began)
            )
            if ran is None or isinstance(ran, Overran):
                run.running = None if ran is None else ran.task  # leased here, not chained
                break
            outcome = ran
            if not outcome.ok:
                run.failed = (nxt, outcome)
                break
            task = nxt
            run.chained.append((task, outcome))
        return (appends[0] if len(appends) == 1 else chain_appends(appends)), run

    def _hold(self, leases: list[Lease], task: Task, outcome: Outcome) -> None:
        """Keep the failed outcome of a chained task for the lease the commit returned
        (its worker reports it instead of running the task again)."""
        assert self.chain is not None
        for leased in leases:
            if leased.task.task_id == task.task_id:
                self.chain.hold(leased, outcome)

    def _decide(self, cached: Cached, task: Task, outcome: Outcome) -> Append:
        """The append of the engine's decision on `task`'s successful `outcome` (the
        cached state moves on with it)."""
        state = cached.state
        now = time.time()
        before = state.seq
        event = Event(
            0, EventType.TOOL_PROCESSED, task.execution_id, now, None, outcome.to_payload()
        )
        decision = cached.engine.decide(state, event, now)
        return self.decider.append(
            state,
            before=before,
            events=decision.events,
            commands=decision.commands,
            now=now,
            playbook=cached.engine.playbook,
        )

    def _chainable(
        self, cached: Cached, append: Append, lease_ids: list[str], depth: int, began: float
    ) -> Task | None:
        """The task `append` dispatches that the chain may run before the commit: the only
        one it dispatches, to this worker, a plain decision (`plain`), the only task in
        flight of its execution, while the chain is within its steps and its time."""
        chain = self.chain
        if (
            chain is None
            or depth >= chain.steps
            or len(append.enqueue) != 1
            or len(lease_ids) != 1
            or not plain(append)
            or time.monotonic() - began > chain.budget_s
        ):
            return None
        item = append.enqueue[0]
        if item.delay_s or item.task.task_id != lease_ids[0]:
            return None
        if set(cached.state.tasks) != {item.task.task_id}:
            return None  # another task is in flight: its outcome may come first
        return item.task if chain.may_run(cached.engine, item.task) else None

    def _forget(self, task: Task) -> None:
        """Stop `task`, sent to a child before a commit that did not lease it here."""
        if self.early is not None:
            self.early.forget(task)
        elif self.chain is not None:
            self.chain.forget(task)

    def _start_early(self, append: Append, lease_ids: list[str]) -> Task | None:
        """Start the one task this commit is to lease this worker in a python child now
        (`EarlyStart`); the task sent, or None."""
        if self.early is None or len(lease_ids) != 1:
            return None
        for item in append.enqueue:
            if item.task.task_id == lease_ids[0]:
                return self.early.start(item.task)
        return None


@dataclass(slots=True)
class _Run:
    """What `_run_chain` did besides its append: the tasks of that append to lease to this
    worker, the tasks run in the chain, a chained task that failed, and one still running
    in its child when the chain's time was up (`noetl.worker.chain.Overran`)."""

    lease_ids: list[str] = field(default_factory=list)
    chained: list[tuple[Task, Outcome]] = field(default_factory=list)
    failed: tuple[Task, Outcome] | None = None
    running: Task | None = None


def _leases(leases: Completed, task: Task) -> bool:
    """Whether a commit's answer leased `task` to this worker."""
    return isinstance(leases, list) and any(lease.task.task_id == task.task_id for lease in leases)
