"""Retention over a connector: `RetentionPort.prune` for SQLite and PostgreSQL.

A prune works in batches of executions, each one transaction: it locks the batch's
execution rows (PostgreSQL: `FOR UPDATE SKIP LOCKED`, so an execution being written to
waits for the next pass), keeps each one's highest fencing token as its floor, deletes its
history table by table and leaves its row as a tombstone. Short transactions keep locks
short: the queue and the inbox stay live during a prune of millions of rows.
"""

from __future__ import annotations

from noetl.store.connector import Connector
from noetl.store.records import PRUNED_TABLES, PruneReport

# pg_advisory_lock key that lets one prune at a time run on a PostgreSQL database (the
# bytes of "noetl-rt"); the migrations' and the template's keys differ.
RETENTION_LOCK = 0x6E6F65746C2D7274

# The tables whose rows go with their execution's batch (the dead letters go after).
_BY_EXECUTION = tuple(table for table in PRUNED_TABLES if table != "dlq")


class Retention:
    """`prune` over a connector."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def prune(
        self,
        finished_before: float,
        *,
        dead_letters_before: float,
        batch: int = 1000,
        dry_run: bool = False,
    ) -> PruneReport:
        """See `RetentionPort.prune`."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        params = {
            "before": self._db.ts(finished_before),
            "dlq_before": self._db.ts(dead_letters_before),
            "limit": batch,
        }
        with self._db.exclusive(RETENTION_LOCK) as mine:
            if not mine:
                rows = dict.fromkeys(PRUNED_TABLES, 0)
                return PruneReport(rows=rows, dry_run=dry_run, skipped=True)
            if dry_run:
                return self._count(params)
            return self._delete(params, batch)

    def _count(self, params: dict[str, object]) -> PruneReport:
        row = self._db.fetch_one("count_prunable", params)
        counts = [0] * (len(PRUNED_TABLES) + 1) if row is None else [int(n) for n in row]
        rows = dict(zip(PRUNED_TABLES, counts[1:], strict=True))
        return PruneReport(counts[0], rows, dry_run=True)

    def _delete(self, params: dict[str, object], batch: int) -> PruneReport:
        rows = dict.fromkeys(PRUNED_TABLES, 0)
        executions = batches = 0
        while True:
            with self._db.transaction() as tx:
                ids = [row[0] for row in tx.fetch_all("prunable_executions", params)]
                if not ids:
                    break
                chosen = {"ids": tx.json_in(ids)}
                tx.execute("keep_token_floor", chosen)
                for table in _BY_EXECUTION:
                    rows[table] += tx.execute(f"prune_{table}", chosen)
                tx.execute("tombstone_executions", chosen)
            executions += len(ids)
            batches += 1
        while True:
            with self._db.transaction() as tx:
                gone = tx.execute("prune_dlq", params)
            rows["dlq"] += gone
            if gone < batch:
                break
        return PruneReport(executions, rows, batches=batches)
