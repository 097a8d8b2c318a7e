"""How a worker reports outcomes to the inbox: from one thread, many at a time, and never
by losing one.

Task threads hand their outcomes to a `Reporter`, whose thread sends the ones waiting
together (`Store.complete_many`, one statement), retrying while the database is away.

A report the store refuses for any other reason (a value it cannot hold, such as NaN in
PostgreSQL's jsonb; a result that is not JSON at all; a bug) costs its own task only:
the batch is sent again one report at a time, and a report that still fails is replaced
by a failed outcome (`REPORT_ERROR`, fatal) that says why, so the execution fails that
task or routes on it instead of waiting for a result that will never come. The reporter
thread survives every such failure; should it die all the same, `ensure_running` (called
by the worker's claim loop) starts another on the same queue, and the reports it held
are marked sent without an answer, so their tasks leave the worker and their leases
expire instead of being heartbeaten forever.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from noetl.core import Outcome
from noetl.errors import NoetlError
from noetl.store.base import Lease, Store

log = logging.getLogger("noetl.worker")

REPORT_BATCH = 256  # outcomes sent to the inbox in one statement, at most
# The error type of the failed outcome that replaces one the store refused: fatal, since
# the same result would be refused again.
REPORT_ERROR = "ReportError"


@dataclass
class Report:
    """An outcome on its way to the inbox; `sent` is set once it was sent (or given up):
    `accepted` True (recorded), False (the lease was no longer held) or None (not sent)."""

    lease: Lease
    outcome: Outcome
    accepted: bool | None = None
    sent: threading.Event = field(default_factory=threading.Event)


def refused_outcome(outcome: Outcome, exc: BaseException) -> Outcome:
    """The failed outcome that replaces `outcome` when it could not be reported."""
    reason = str(exc) if isinstance(exc, ValueError | NoetlError) else ""
    reason = reason or f"{type(exc).__name__}: {exc}"
    return Outcome(
        task_id=outcome.task_id,
        ok=False,
        error=f"the worker could not report the task's result: {reason}"[:2000],
        error_type=REPORT_ERROR,
        retryable=False,
        duration_ms=outcome.duration_ms,
    )


def tool_error(task_id: str, exc: Exception) -> Outcome:
    """The failed outcome of a tool's error past the registry's guards (the last line):
    the error as it is, retryable when the exception says so."""
    return Outcome(
        task_id,
        ok=False,
        error=str(exc),
        error_type=type(exc).__name__,
        retryable=getattr(exc, "retryable", False) is True,
    )


def worker_failure(task_id: str, exc: BaseException, *, started: bool) -> Outcome:
    """The failed outcome of a task the worker itself failed: it could not start it
    (retryable: another worker may have what this one lacks), or a bug past the tool's
    guards failed running or reporting it (`REPORT_ERROR`)."""
    if not started:
        return Outcome(
            task_id,
            ok=False,
            error=f"the worker could not start the task: {type(exc).__name__}: {exc}",
            error_type="RetryableError",
            retryable=True,
        )
    return Outcome(
        task_id,
        ok=False,
        error=f"the worker failed running or reporting the task: {type(exc).__name__}: {exc}",
        error_type=REPORT_ERROR,
    )


class Reporter:
    """Sends reports to the store's inbox from a thread of its own (see the module)."""

    def __init__(self, store: Store, *, give_up_s: float, errors: list[str]) -> None:
        self.store = store
        self.give_up_s = give_up_s  # how long a batch is retried while the database is away
        self.errors = errors
        self._queue: queue.SimpleQueue[Report | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._running = False
        self._lock = threading.Lock()

    # --- the thread ----------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            self._running = True
            self._start_thread()

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._loop, name="noetl-reporter", daemon=True)
        thread.start()
        self._thread = thread

    def ensure_running(self) -> bool:
        """Start a new reporter thread if the current one died; True when one had to be."""
        with self._lock:
            if not self._running or self._thread is None or self._thread.is_alive():
                return False
            log.error("the reporter thread died; starting another")
            self._start_thread()
            return True

    def stop(self, timeout: float) -> None:
        """Send what is queued, then stop the thread (waiting up to `timeout` seconds).
        Reports still queued then are given up (marked sent, unanswered: their leases
        expire); reports made afterwards are sent by their own threads."""
        with self._lock:
            self._running = False
            thread = self._thread
            self._queue.put(None)
        if thread is not None:
            thread.join(timeout=timeout)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item.sent.set()

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return
            try:
                self.send(batch)
            finally:  # even if this thread dies here, nobody waits for these forever
                for report in batch:
                    report.sent.set()

    def _take(self) -> list[Report]:
        """The reports waiting now (at least one, blocking for it); empty when told to stop
        (None), after putting the stop mark back for the reports behind it."""
        first = self._queue.get()
        if first is None:
            return []
        batch = [first]
        while len(batch) < REPORT_BATCH:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)  # stop once this batch is sent
                break
            batch.append(item)
        return batch

    # --- reporting -----------------------------------------------------------------------

    def report(self, report: Report) -> None:
        """Hand a report to the thread and wait until it was sent; sent here when no
        thread runs."""
        self.report_many([report])

    def report_many(self, reports: list[Report]) -> None:
        """Hand reports to the thread together and wait until all were sent; sent here
        when no thread runs."""
        with self._lock:  # queued before a stop's mark, or not queued at all
            running = self._running and self._thread is not None
            if running:
                for report in reports:
                    self._queue.put(report)
        if not running:
            self.send(reports)
            return
        for report in reports:
            report.sent.wait()

    def send(self, batch: list[Report]) -> None:
        """Send the batch; a refused batch is sent one report at a time, and a refused
        report is replaced by the failed outcome that says why. Never raises for an
        Exception; marks every report sent."""
        try:
            self._send_together(batch)
        except Exception as exc:
            if len(batch) > 1:
                log.warning(
                    "reporting %d outcomes failed (%s); sending them one by one", len(batch), exc
                )
                for report in batch:
                    self.send([report])
            else:
                self._send_refused(batch[0], exc)
        finally:
            for report in batch:
                report.sent.set()

    def _send_refused(self, report: Report, exc: Exception) -> None:
        task_id = report.lease.task.task_id
        log.error(
            "the result of %s could not be reported (%s); reporting the task failed",
            task_id,
            exc,
            exc_info=not isinstance(exc, ValueError | NoetlError),
        )
        report.outcome = refused_outcome(report.outcome, exc)
        try:
            self._send_together([report])
        except Exception as again:  # the store is broken beyond one value: the lease expires
            log.error("could not report the failure of %s either: %s", task_id, again)
            self.errors.append(str(again))

    def _send_together(self, batch: list[Report]) -> None:
        """One `complete_many` for the batch, retried while the database is away (up to
        `give_up_s`); sets `accepted` of every report (left None when given up). Raises
        what is not the database being away."""
        deadline = time.monotonic() + self.give_up_s
        delay = 0.1
        items = [(r.lease.task.task_id, r.lease.token, r.outcome.to_payload()) for r in batch]
        while True:
            try:
                accepted = self.store.complete_many(items)
                break
            except NoetlError as exc:
                if time.monotonic() > deadline:
                    log.error("could not report %d outcomes: %s", len(batch), exc)
                    self.errors.append(str(exc))
                    return
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        for report in batch:
            report.accepted = report.lease.task.task_id in accepted
