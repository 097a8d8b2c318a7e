"""Retention: deleting the history of executions that finished long ago, so a deployment
stays fast after months of it (`noetl db prune`, and the server's job: `retention.*`).

The store does the deleting (`RetentionPort.prune`, in batches, one prune per database at
a time); this module turns settings into cutoffs (`RetentionPolicy`, with the time given by
the caller) and runs the server's periodic pass (`RetentionJob`): a log event per pass,
rows per table and the last pass's time as metrics.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from noetl.config import Settings
from noetl.observability.logging import log_event
from noetl.observability.metrics import Metrics
from noetl.runtime.periodic import every
from noetl.store.base import PruneReport, RetentionPort

__all__ = ["RetentionJob", "RetentionPolicy"]

log = logging.getLogger("noetl.retention")
DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What to prune: executions finished over `older_than_s` ago, and the dead letters
    of pruned executions settled over `dead_letters_after_s` ago; `batch` executions per
    transaction."""

    older_than_s: float
    dead_letters_after_s: float
    batch: int = 1000

    @classmethod
    def of(
        cls, settings: Settings, *, older_than_s: float | None = None, batch: int | None = None
    ) -> RetentionPolicy:
        """The policy of `settings` (`retention.*`, `dlq.retention_days`), with the
        command line's overrides."""
        return cls(
            older_than_s=settings.retention.older_than_s if older_than_s is None else older_than_s,
            dead_letters_after_s=settings.dlq.retention_days * DAY_S,
            batch=settings.retention.batch if batch is None else batch,
        )

    def prune(self, store: RetentionPort, *, now: float, dry_run: bool = False) -> PruneReport:
        """Prune `store` as of `now` (epoch seconds)."""
        return store.prune(
            now - self.older_than_s,
            dead_letters_before=now - self.dead_letters_after_s,
            batch=self.batch,
            dry_run=dry_run,
        )


class RetentionJob:
    """The server's retention pass, every `interval_s` from its start, until stopped."""

    def __init__(
        self,
        store: RetentionPort,
        policy: RetentionPolicy,
        *,
        interval_s: float,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.policy = policy
        self.interval_s = interval_s
        self.metrics = metrics
        self.clock = clock
        if metrics is not None:  # the RetentionStalled alert compares passes to it
            metrics.retention_interval.set(interval_s)

    def run_once(self) -> PruneReport:
        """One pass: prune, then log it and count it."""
        started = time.monotonic()
        report = self.policy.prune(self.store, now=self.clock())
        log_event(
            log,
            logging.INFO,
            "retention_pass",
            skipped=report.skipped,
            executions=report.executions,
            rows=report.total,
            batches=report.batches,
            duration_s=round(time.monotonic() - started, 3),
            **{f"rows_{table}": count for table, count in report.rows.items() if count},
        )
        if self.metrics is not None and not report.skipped:
            for table, count in report.rows.items():
                self.metrics.pruned_rows.child(table).inc(count)
            self.metrics.pruned_executions.inc(report.executions)
            self.metrics.last_prune.set(self.clock())
        return report

    def serve(self, stop: threading.Event) -> None:
        """Run a pass now and every `interval_s` until `stop` is set; a failed pass (a
        database blip) is logged and tried again at the next interval."""
        every(self.interval_s, stop, self.run_once, what="retention")
