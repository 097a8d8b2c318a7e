"""The partitions of `event_log` and `step_state` on PostgreSQL:
`RetentionPort.rotate_partitions`, a part of `PostgresStore` (SQLite and the memory store
keep one table each).

Migration 0018 partitions both tables by range of execution id, and ids begin with their
start time, so a partition is a span of time. A pass makes the partitions the coming ids
will fall in (a period each, up to `ahead_days` from now) and drops those whose
executions are all pruned. The work is in the migration's functions, each one statement:
one pass at a time per database (an advisory lock), and a drop waits at most 2 s for the
commits in flight.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from noetl.store.queries import QUERIES
from noetl.store.records import PartitionReport

SQL = QUERIES["postgres"]


class PgPartitions:
    """`rotate_partitions` on the store's pool (`_connection`)."""

    _connection: Callable[[], AbstractContextManager[psycopg.Connection[tuple[Any, ...]]]]

    def rotate_partitions(self, *, period_days: int, ahead_days: int) -> PartitionReport:
        """See `RetentionPort.rotate_partitions`."""
        PartitionReport.check(period_days, ahead_days)
        with self._connection() as conn:
            made = conn.execute(SQL["add_partitions"], {"period": period_days, "ahead": ahead_days})
            names = tuple(str(row[0]) for row in made.fetchall())
            dropped = conn.execute(SQL["drop_partitions"]).fetchall()
        return PartitionReport(names, tuple(str(row[0]) for row in dropped))
