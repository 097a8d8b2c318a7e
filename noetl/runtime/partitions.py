"""The server's partition job (PostgreSQL): the partitions of `event_log` and
`step_state` made ahead of the ids to come, and those whose executions are all pruned
dropped (`RetentionPort.rotate_partitions`, `db.partition_days`).

It runs at the server's start and then every `interval_s`, whether retention is on or
not: new executions write to partitions of their own time only when those exist (else
to the default partition, which works, but keeps the slowdown a long history brings).
"""

from __future__ import annotations

import logging
import threading
import time

from noetl.observability.logging import log_event
from noetl.runtime.periodic import every
from noetl.store.base import RetentionPort
from noetl.store.records import PartitionReport

__all__ = ["PartitionJob"]

log = logging.getLogger("noetl.partitions")


class PartitionJob:
    """Make partitions `period_days` long, `ahead_periods` periods ahead; every
    `interval_s`."""

    def __init__(
        self,
        store: RetentionPort,
        *,
        period_days: int,
        ahead_periods: int = 2,
        interval_s: float = 3600.0,
    ) -> None:
        self.store = store
        self.period_days = period_days
        self.ahead_days = period_days * ahead_periods
        self.interval_s = interval_s

    def run_once(self) -> PartitionReport:
        """One pass; a log event when it made or dropped a partition."""
        started = time.monotonic()
        report = self.store.rotate_partitions(
            period_days=self.period_days, ahead_days=self.ahead_days
        )
        if report.made or report.dropped:
            log_event(
                log,
                logging.INFO,
                "partitions_pass",
                made=list(report.made),
                dropped=list(report.dropped),
                duration_s=round(time.monotonic() - started, 3),
            )
        return report

    def serve(self, stop: threading.Event) -> None:
        """A pass now and every `interval_s` until `stop` is set; a failed pass (a
        database blip, a drop that waited too long for a lock) is logged and tried again
        at the next interval."""
        every(self.interval_s, stop, self.run_once, what="partitions")
