"""A chain: the steps a worker's continuation runs before it commits (local steps).

A continuation decides what follows a task right where it ran (`noetl.worker.continuation`).
When that decision dispatches one short python task to this worker and nothing else, the
worker may run that task at once, decide on its outcome too, and so on, and commit the
whole chain in ONE transaction: the first task done, every decision's events in order,
and what the last decision dispatches. A chain of five steps costs one commit instead of
five. The tasks run inside a chain get no queue row: their dispatch events record them,
as in the embedded runtime. (Temporal's local activities make the same trade.)

What a chain gives up is the durability of each step on its own: until the chain commits,
the steps it ran are known to this worker only. If the worker dies, or the commit is
refused (a cancel, another server), the first task's outcome is reported through the
inbox as usual and the chained steps run again when they are dispatched again: at least
once, as every task is. That is why a chain is short, in steps (`steps`) and in time
(`budget_s`: no step starts past it, and none holds the commit past it), and only takes
python tasks with no secrets or sinks of a step that last ran in less than that time on
this worker (`observe`), or, for a step not seen yet, while the worker's recent python
tasks ran under a millisecond (`Pace.short`): a step seen to run long is not held in a
chain again.

A chained task is sent to a free child (`PythonPool.start_early`) and waited for until the
chain's time is up. One that runs longer (`Overran`) ends the chain where it is: the
commit leases it to this worker, whose run of that lease takes its reply from the child
it runs in, so a step that turns out long costs its chain nothing but the wait. With no
child free at once, a step seen short here runs in the next child free; a step not seen
yet is not chained. A chained task that fails ends the chain: the commit leases it to this
worker and its outcome (`take`) goes through the inbox, where failures are decided.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import NamedTuple

from noetl.core import Outcome, Task
from noetl.decision.workloads import Workloads
from noetl.observability import Observer
from noetl.store.base import Lease
from noetl.worker.ahead import Pace, pool_of, sendable
from noetl.worker.reporting import tool_error
from noetl.worker.tools import ToolRegistry

__all__ = ["CHAIN_MS", "CHAIN_STEPS", "Chain", "Overran"]

# Defaults: steps a chain runs past its first task, and how long it may keep running them.
CHAIN_STEPS = 8
CHAIN_MS = 25.0


class Overran(NamedTuple):
    """A chained task still running in its child when the chain's time was up (`task`:
    as sent, its workload attached)."""

    task: Task


class Chain:
    """Runs the tasks a continuation chains (`may_run`, `run`), and keeps the outcome of a
    chained task that failed until its worker runs its lease (`hold`, `take`)."""

    def __init__(
        self,
        tools: ToolRegistry,
        pace: Pace,
        workloads: Workloads,
        stopping: Callable[[], bool],
        observer: Observer,
        *,
        steps: int = CHAIN_STEPS,
        budget_s: float = CHAIN_MS / 1000,
    ) -> None:
        if steps < 1:
            raise ValueError("a chain runs at least one step (or none is made)")
        self.steps = steps
        self.budget_s = budget_s
        self._tools = tools
        self._pool = pool_of(tools)
        self._pace = pace
        self._workloads = workloads
        self._stopping = stopping
        self._observer = observer
        self._held: dict[tuple[str, int], Outcome] = {}
        # How long each python step of a playbook last took, by the playbook's engine.
        self._took: weakref.WeakKeyDictionary[object, dict[str, float]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def observe(self, playbook: object, task: Task, outcome: Outcome) -> None:
        """Note how long a python task of `playbook` took (decided by this worker's
        continuation; `playbook` is what stands for one playbook text, its engine): a step
        seen to run long is not chained."""
        if task.kind != "python" or outcome.duration_ms is None:
            return
        with self._lock:
            took = self._took.get(playbook)
            if took is None:
                took = self._took[playbook] = {}
            took[task.step] = outcome.duration_ms

    def may_run(self, playbook: object, task: Task) -> bool:
        """Whether `task` may run in a chain: a python task with no secrets and no sinks,
        not a loop item, of a step that last ran here in less than the chain's time (a
        step that runs long is not held in a chain), or of a step not seen yet while the
        recent python tasks ran short (`Pace.short`); its execution's workload at hand,
        the worker not stopping."""
        if not sendable(task) or task.sinks or task.index is not None or self._stopping():
            return False
        took = self._took_ms(playbook, task)
        short = self._pace.short if took is None else took < self.budget_s * 1000
        return short and self._workloads.known(task.execution_id)

    def run(self, playbook: object, task: Task, within_s: float) -> Outcome | Overran | None:
        """Run `task` (of `playbook`) in a free child through the worker's tool chain, its
        workload attached: its outcome (a tool's error past the registry's guards is a
        failed one) if it ends within `within_s`, else `Overran` (it runs on: the commit
        is to lease it to this worker). None, with nothing run, when no child is free at
        once for a step not seen yet; a step seen short waits for one."""
        attached = self._workloads.attach(task)
        # The pool it was sent to, or None (no child free at once).
        sent = self._pool if self._pool is not None and self._pool.start_early(attached) else None
        if sent is not None:
            if not sent.early_ready(attached, within_s):
                return Overran(attached)
        elif self._took_ms(playbook, task) is None:
            return None
        self._observer.claimed(task, 0.0)
        try:
            outcome = self._tools.run(attached)
        except Exception as exc:  # the registry already guards; this is the last line
            outcome = tool_error(task.task_id, exc)
        finally:
            if sent is not None:  # its run took the reply, unless a middleware ended it
                sent.forget_early(attached)
        self._pace.observe(task, outcome)
        return outcome

    def forget(self, task: Task) -> None:
        """An `Overran` task its commit did not lease here after all: stop it."""
        if self._pool is not None:
            self._pool.forget_early(task)

    def _took_ms(self, playbook: object, task: Task) -> float | None:
        with self._lock:
            return self._took.get(playbook, {}).get(task.step)

    def hold(self, lease: Lease, outcome: Outcome) -> None:
        """Keep the outcome of a chained task its commit leased to this worker."""
        with self._lock:
            self._held[lease.task.task_id, lease.token] = outcome

    def take(self, lease: Lease) -> Outcome | None:
        """The outcome held for `lease` (then forgotten), or None: run it. By the lease's
        token too: a task handed back as the worker stopped is not taken for a later
        lease of the same task (it may be retried under its id)."""
        with self._lock:
            return self._held.pop((lease.task.task_id, lease.token), None)
