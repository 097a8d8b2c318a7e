"""Several short python tasks per round trip to a python child.

A short python task costs little more than its round trip to a child: the request, the
wake-ups of the child and of the waiting thread, the reply. A thread that has several
such tasks at hand (the embedded runtime's python lane, a worker's claim) sends them to
one child at once (`PythonPool.run_ahead`); each task then goes through its own tool
chain as before and takes its reply there.

Only while the recent python tasks were short (`Pace`): a round trip is nothing next to
a long task, and a long task in a batch holds back the ones behind it while another
child may be idle. Tasks with secrets to resolve are never sent ahead: a middleware of
their own chain resolves them first.

The same holds for the one task a worker's continuation leases itself (the next step of
a chain): `EarlyStart` sends it to a child before the commit that leases it is sent, so
the step runs while the database writes. Should that commit not lease it after all (the
execution moved, the database is away), its child is killed (`PythonPool.forget_early`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from noetl.core import Outcome, Task
from noetl.decision.workloads import Workloads
from noetl.worker.python_pool import PythonPool
from noetl.worker.tools import PythonTool, ToolRegistry

__all__ = [
    "AHEAD",
    "AHEAD_BELOW_MS",
    "AHEAD_CLAIMED",
    "EarlyStart",
    "Pace",
    "pool_of",
    "run_ahead",
    "sendable",
]

# Python tasks sent to a child at once, at most: by the embedded runtime's python lane
# (32 ran no faster than 16 there), and by a worker, of the tasks of one claim (up to its
# slots; 32 ran 1.1x of 16, a claim's tasks in fewer batches).
AHEAD = 16
AHEAD_CLAIMED = 32
# Only while the python tasks' moving average is shorter than this.
AHEAD_BELOW_MS = 1.0


class Pace:
    """A moving average of python tasks' durations. Threads share it without a lock: it
    only decides whether to batch, and nothing depends on it being exact."""

    def __init__(self) -> None:
        self.ms: float | None = None

    def observe(self, task: Task, outcome: Outcome) -> None:
        """Count a python task's duration in the average (other tools are not)."""
        if task.kind != "python" or outcome.duration_ms is None:
            return
        recent, took = self.ms, outcome.duration_ms
        self.ms = took if recent is None else 0.8 * recent + 0.2 * took

    @property
    def short(self) -> bool:
        """True while the recent python tasks ran short enough to batch."""
        recent = self.ms
        return recent is not None and recent < AHEAD_BELOW_MS


def pool_of(tools: ToolRegistry) -> PythonPool | None:
    """The python pool of the registry's `python` tool (None: none, or another tool)."""
    python = tools.get("python") if "python" in tools else None
    return python.pool if isinstance(python, PythonTool) else None


def sendable(task: Task) -> bool:
    """Whether `task` may go to a child in a batch: python, with no secrets to resolve."""
    return task.kind == "python" and not task.secrets


def run_ahead(pool: PythonPool, tasks: Sequence[Task]) -> None:
    """Run the sendable ones of `tasks` (with their workloads attached) in one child; their
    `run` calls take the replies (`PythonPool.run_ahead`)."""
    ready = [task for task in tasks if sendable(task)]
    if len(ready) > 1:
        pool.run_ahead(ready)


class EarlyStart:
    """Sends the next task a continuation leases this worker to a child before its commit
    (see the module's docstring): a short python task with no secrets whose execution's
    workload is at hand, while the worker is not stopping."""

    def __init__(
        self, pool: PythonPool, pace: Pace, workloads: Workloads, stopping: Callable[[], bool]
    ) -> None:
        self._pool = pool
        self._pace = pace
        self._workloads = workloads
        self._stopping = stopping

    def start(self, task: Task) -> Task | None:
        """Send `task` (its workload attached) to a free child; the task sent, or None."""
        if not (self._pace.short and sendable(task)) or self._stopping():
            return None
        if not self._workloads.known(task.execution_id):
            return None  # reading it would delay the commit
        attached = self._workloads.attach(task)
        return attached if self._pool.start_early(attached) else None

    def forget(self, task: Task) -> None:
        """`task` will not be run here after all: stop it if it was sent (else nothing)."""
        self._pool.forget_early(task)
