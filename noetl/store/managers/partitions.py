"""The partitions of `event_log` and `step_state` over a connector (PostgreSQL; SQLite
keeps one table each): `RetentionPort.rotate_partitions`.

Migration 0018 partitions both tables by range of execution id, and ids begin with their
start time, so a partition is a span of time. A pass makes the partitions the coming ids
will fall in (a period each, up to `ahead_days` from now) and drops those whose
executions are all pruned. The work is in the migration's functions: one pass at a time
per database (an advisory lock), and a drop waits at most 2 s for the commits in flight.
"""

from __future__ import annotations

from noetl.store.connector import Connector
from noetl.store.records import PartitionReport


class Partitions:
    """`rotate_partitions` over a connector."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def rotate_partitions(self, *, period_days: int, ahead_days: int) -> PartitionReport:
        """See `RetentionPort.rotate_partitions`."""
        PartitionReport.check(period_days, ahead_days)
        if self._db.dialect != "postgres":
            return PartitionReport()
        params = {"period": period_days, "ahead": ahead_days}
        with self._db.transaction() as tx:
            made = tuple(str(row[0]) for row in tx.fetch_all("add_partitions", params))
        with self._db.transaction() as tx:
            dropped = tuple(str(row[0]) for row in tx.fetch_all("drop_partitions", {}))
        return PartitionReport(made, dropped)
