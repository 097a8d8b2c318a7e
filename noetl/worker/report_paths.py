"""Where a worker sends the outcome of a task it ran.

Reporting takes one of two paths:

* The inbox: the outcome goes to the store's inbox (through the `Reporter`,
  `noetl.worker.reporting`) and a server's orchestrator decides what follows. Failures
  always take this path, so retries, the DLQ and failure policies are decided in one place.
* The continuation (when the worker has a `Decider`, `noetl.worker.continuation`): a
  successful task that was the only task in flight of its execution is decided right here
  and committed in ONE transaction with the task's completion; the tasks it dispatches are
  leased to this worker in that transaction and run at once. A chain of steps then costs
  one transaction per step instead of two process hops through the database. If the
  execution moved meanwhile (a cancel, another server), nothing is written and the
  outcome takes the inbox path.

Each outcome is observed with the path it took; the worker counts them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from noetl.core import Outcome, Task
from noetl.observability import Observer, ReportPath
from noetl.store.base import Lease
from noetl.worker.continuation import Continuation, may_continue
from noetl.worker.reporting import Report, Reporter

log = logging.getLogger("noetl.worker")

__all__ = ["ReportPaths"]


class ReportPaths:
    """Reports outcomes by the continuation when that applies, else through the inbox."""

    def __init__(
        self, reporter: Reporter, continuation: Continuation | None, observer: Observer
    ) -> None:
        self._reporter = reporter
        self._continuation = continuation
        self._observer = observer

    def report(
        self, lease: Lease, outcome: Outcome, free_slots: Callable[[], int]
    ) -> tuple[ReportPath | None, list[Lease], int]:
        """Report the outcome: by deciding its continuation here when that applies (the
        leases it returns are this worker's next tasks), else through the inbox. The path
        it took (None: sent without an answer), and how many tasks the continuation ran
        in its chain and committed with it (`noetl.worker.chain`)."""
        task = lease.task
        if self._continuation is not None and outcome.ok and may_continue(lease):
            done = self._continuation.attempt(lease, outcome, free_slots)
            if done is not None and done.refused:
                log.info("result of %s refused: lease no longer held", task.task_id)
                self.observe(task, outcome, "refused")
                return "refused", [], 0
            if done is not None:
                self.observe(task, outcome, "continued")  # its leases must run regardless
                for chained, result in done.chained:  # run and committed in its chain
                    self.observe(chained, result, "continued")
                return "continued", done.leases, len(done.chained)
        return self.complete(lease, outcome), [], 0

    def complete(self, lease: Lease, outcome: Outcome) -> ReportPath | None:
        """Report the outcome to the inbox with the lease's token, through the reporter
        (reports that wait meanwhile go in one statement); an outcome the store refuses is
        replaced by the failure that says why. "inbox", "refused", or None when the report
        was given up without an answer."""
        report = Report(lease, outcome)
        self._reporter.report(report)
        return self._sent(report)

    def complete_many(self, done: Sequence[tuple[Lease, Outcome]]) -> list[ReportPath | None]:
        """`complete` for several outcomes at once: sent together, each with its path."""
        reports = [Report(lease, outcome) for lease, outcome in done]
        if reports:
            self._reporter.report_many(reports)
        return [self._sent(report) for report in reports]

    def _sent(self, report: Report) -> ReportPath | None:
        """The path a sent report took, observed (None: given up without an answer)."""
        if report.accepted is None:
            return None
        path: ReportPath = "inbox" if report.accepted else "refused"
        self.observe(report.lease.task, report.outcome, path)
        if not report.accepted:
            log.info("result of %s refused: lease no longer held", report.lease.task.task_id)
        return path

    def observe(self, task: Task, outcome: Outcome, path: ReportPath) -> None:
        """Tell the observer; its failure is logged, never raised."""
        try:
            self._observer.reported(task, outcome, path)
        except Exception:
            log.exception("observing the report of %s failed", task.task_id)
