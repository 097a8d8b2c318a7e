"""The memory store's retention (`RetentionPort.prune`): a part of `MemoryStore`
(noetl.store.memory), on its dicts and under its lock. SQLite and PostgreSQL:
`noetl.store.managers.retention`."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from noetl.core import ExecutionStatus
from noetl.store._memory_checkpoints import MemoryCheckpoints
from noetl.store._memory_results import MemoryResults
from noetl.store._rows import EventRow
from noetl.store.records import (
    PRUNED_TABLES,
    Clock,
    DeadLetterStatus,
    PartitionReport,
    PruneReport,
)


class MemoryRetention:
    """`prune` of `MemoryStore`, whose state it shares."""

    _clock: Clock
    _lock: threading.Lock
    _executions: dict[str, dict[str, Any]]
    _steps: dict[str, dict[str, str]]
    _tasks: dict[str, dict[str, Any]]
    _inbox: dict[int, dict[str, Any]]
    _dlq: dict[str, dict[str, Any]]
    _events: dict[str, list[EventRow]]
    _compiled: dict[str, str | None]
    results: MemoryResults
    checkpoints: MemoryCheckpoints

    def prune(
        self,
        finished_before: float,
        *,
        dead_letters_before: float,
        batch: int = 1000,
        dry_run: bool = False,
    ) -> PruneReport:
        """See `RetentionPort.prune`; a batch is one turn under the lock."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        rows = dict.fromkeys(PRUNED_TABLES, 0)
        executions = batches = 0
        would_go: set[str] = set()  # a dry run's: it prunes nothing
        while True:
            with self._lock:
                chosen = self._prunable(finished_before, None if dry_run else batch)
                if not chosen:
                    break
                self._count(chosen, rows, dry_run=dry_run)
                if not dry_run:
                    self._tombstone(chosen)
            rows["result_store"] += self.results.forget(set(chosen), dry_run=dry_run)
            rows["task_checkpoint"] += self.checkpoints.forget(set(chosen), dry_run=dry_run)
            executions += len(chosen)
            if dry_run:
                would_go.update(chosen)
                break
            batches += 1
        with self._lock:
            rows["dlq"] += self._settled_dead_letters(
                dead_letters_before, would_go, dry_run=dry_run
            )
        return PruneReport(executions, rows, dry_run=dry_run, batches=batches)

    def rotate_partitions(self, *, period_days: int, ahead_days: int) -> PartitionReport:
        """See `RetentionPort.rotate_partitions`: nothing to make or drop here."""
        PartitionReport.check(period_days, ahead_days)
        return PartitionReport()

    def _prunable(self, finished_before: float, limit: int | None) -> list[str]:
        held = {  # a pending dead letter's replay needs its execution's history
            row["execution_id"]
            for row in self._dlq.values()
            if row["status"] == DeadLetterStatus.PENDING.value
        }
        found = sorted(
            (row["finished_at"], execution_id)
            for execution_id, row in self._executions.items()
            if row["status"] != ExecutionStatus.RUNNING
            and row.get("pruned_at") is None
            and row["finished_at"] is not None
            and row["finished_at"] < finished_before
            and execution_id not in held
        )
        return [execution_id for _, execution_id in found[:limit]]

    def _count(self, chosen: Sequence[str], rows: dict[str, int], *, dry_run: bool) -> None:
        ids = set(chosen)
        tasks = [t for t, row in self._tasks.items() if row["execution_id"] in ids]
        inputs = [i for i, row in self._inbox.items() if row["execution_id"] in ids]
        rows["task_queue"] += len(tasks)
        rows["inbox"] += len(inputs)
        rows["execution_input"] += len(ids)
        rows["event_log"] += sum(len(self._events.get(e, ())) for e in ids)
        rows["step_state"] += sum(len(self._steps.get(e, {})) for e in ids)
        if dry_run:
            return
        for execution_id in ids:
            floor = max(
                (
                    self._tasks[t]["lease_token"]
                    for t in tasks
                    if self._tasks[t]["execution_id"] == execution_id
                ),
                default=0,
            )
            row = self._executions[execution_id]
            row["token_floor"] = max(row.get("token_floor", 0), floor)
        for task_id in tasks:
            del self._tasks[task_id]
        for input_id in inputs:
            del self._inbox[input_id]

    def _tombstone(self, chosen: Sequence[str]) -> None:
        now = self._clock()
        for execution_id in chosen:
            self._events[execution_id] = []
            self._steps[execution_id] = {}
            self._compiled.pop(execution_id, None)
            self._executions[execution_id].update(pruned_at=now, context="{}", playbook_text="")

    def _settled_dead_letters(self, before: float, would_go: set[str], *, dry_run: bool) -> int:
        """Delete the settled dead letters of pruned executions older than `before`; with
        `dry_run`, count them, and those of `would_go` (the executions it would prune)."""
        settled = (DeadLetterStatus.REPLAYED.value, DeadLetterStatus.DISCARDED.value)
        gone = [
            message_id
            for message_id, row in self._dlq.items()
            if row["status"] in settled
            and row["updated_at"] < before
            and (
                self._executions[row["execution_id"]].get("pruned_at") is not None
                or row["execution_id"] in would_go
            )
        ]
        if not dry_run:
            for message_id in gone:
                del self._dlq[message_id]
        return len(gone)
