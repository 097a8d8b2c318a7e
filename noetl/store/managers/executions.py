"""Reading executions: their rows, event logs, step states and families. (Their writes
go with a commit, in the adapters, in the same transaction as the queue's.)"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from noetl.core import Event, ExecutionStatus, HistoryPrunedError, NotFoundError
from noetl.store._rows import check_page
from noetl.store.connector import Connector, Row
from noetl.store.records import ExecutionRecord, check_load_many

# Ids per statement of `finished_among`: a wait on many executions reads them in a few.
FINISHED_AMONG_CHUNK = 1000


class Executions:
    """The reads of `ExecutionPort` over a connector."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def _record(self, row: Row) -> ExecutionRecord:
        epoch = self._db.epoch
        return ExecutionRecord(
            execution_id=row[0],
            playbook_name=row[1],
            playbook_path=row[2],
            playbook_text=row[3],
            status=ExecutionStatus(row[4]),
            context=self._db.json_value(row[5]),
            parent_execution_id=row[6],
            last_seq=row[7],
            created_at=epoch(row[8]),
            updated_at=epoch(row[9]),
            finished_at=None if row[10] is None else epoch(row[10]),
            pruned_at=None if row[11] is None else epoch(row[11]),
        )

    @staticmethod
    def _events(db: Connector, execution_id: str, rows: list[Row]) -> list[Event]:
        """`load_events` rows (seq, type, ts, step, payload) as events."""
        return [
            Event(seq, type_, execution_id, db.epoch(ts), step, db.json_value(payload))
            for seq, type_, ts, step, payload in rows
        ]

    @staticmethod
    def _missing(db: Connector, execution_id: str) -> None:
        """NotFoundError when there is no such execution, HistoryPrunedError when only
        its tombstone is left; nothing when it exists."""
        row = db.fetch_one("execution_exists", {"execution_id": execution_id})
        if row is None:
            raise NotFoundError(f"execution {execution_id} not found")
        if row[0] is not None:
            raise HistoryPrunedError(execution_id, db.epoch(row[0]))

    def get_compiled(self, execution_id: str) -> str | None:
        row = self._db.fetch_one("compiled_playbook", {"execution_id": execution_id})
        return None if row is None else row[0]

    def load_events(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events in sequence order after `after_seq`, at most `limit`."""
        check_page(limit)
        params = {"execution_id": execution_id, "after_seq": after_seq, "limit": limit}
        with self._db.session() as db:
            rows = db.fetch_all("load_events", params)
            # Only an empty answer needs the extra lookup that tells "none" from "no such".
            if not rows:
                self._missing(db, execution_id)
        return self._events(db, execution_id, rows)

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        row = self._db.fetch_one("get_execution", {"execution_id": execution_id})
        return None if row is None else self._record(row)

    def load_execution(self, execution_id: str) -> tuple[ExecutionRecord, list[Event]] | None:
        """The row and the events in one session: on PostgreSQL one statement, whose last
        column is the events as JSON text (`[[seq, type, epoch seconds, step, payload],
        ...]`); when the statement leaves it NULL (SQLite; a long log on PostgreSQL) they
        are read as rows with a second one."""
        params = {"execution_id": execution_id}
        with self._db.session() as db:
            row = db.fetch_one("load_execution", params)
            if row is None or row[11] is not None:
                return None
            events = self._log(db, row)
        return self._record(row), events

    def load_executions(
        self, execution_ids: Collection[str], *, max_events: int
    ) -> dict[str, tuple[ExecutionRecord, list[Event]]]:
        """Young executions' rows and events: on PostgreSQL one statement, whose last
        column holds each one's events as `load_execution`'s does; on SQLite the events
        are read with a statement each, in the same session."""
        ids = check_load_many(execution_ids, max_events)
        if not ids:
            return {}
        params = {"ids": self._db.json_in(ids), "max_events": max_events}
        loaded: dict[str, tuple[ExecutionRecord, list[Event]]] = {}
        with self._db.session() as db:
            for row in db.fetch_all("load_executions", params):
                loaded[row[0]] = (self._record(row), self._log(db, row))
        return loaded

    def _log(self, db: Connector, row: Row) -> list[Event]:
        """The events of a `load_execution` row: its last column's JSON text, or (when
        it is NULL) read as rows."""
        execution_id = row[0]
        if row[12] is None:
            params = {"execution_id": execution_id, "after_seq": 0, "limit": None}
            return self._events(db, execution_id, db.fetch_all("load_events", params))
        return [
            Event(seq, type_, execution_id, float(ts), step, payload)
            for seq, type_, ts, step, payload in json.loads(db.json_text_out(row[12]))
        ]

    def finished_among(self, execution_ids: Collection[str]) -> dict[str, ExecutionStatus]:
        ids = list(execution_ids)
        found: dict[str, ExecutionStatus] = {}
        for start in range(0, len(ids), FINISHED_AMONG_CHUNK):
            chunk = self._db.json_in(ids[start : start + FINISHED_AMONG_CHUNK])
            for execution_id, status in self._db.fetch_all("finished_among", {"ids": chunk}):
                found[execution_id] = ExecutionStatus(status)
        return found

    def execution_family(self, execution_id: str) -> list[str]:
        rows = self._db.fetch_all("execution_family", {"execution_id": execution_id})
        return [row[0] for row in rows]

    def list_executions(
        self, *, status: ExecutionStatus | None = None, limit: int = 50, offset: int = 0
    ) -> list[ExecutionRecord]:
        """Newest first (created_at, then insertion order); optionally one status."""
        check_page(limit, offset)
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if status is None:
            rows = self._db.fetch_all("list_executions", params)
        else:
            params["status"] = ExecutionStatus(status).value
            rows = self._db.fetch_all("list_executions_by_status", params)
        return [self._record(row) for row in rows]

    def get_steps(self, execution_id: str) -> dict[str, dict[str, Any]]:
        """The step_state projection; NotFoundError if the execution does not exist."""
        with self._db.session() as db:
            rows = db.fetch_all("get_steps", {"execution_id": execution_id})
            if not rows:
                self._missing(db, execution_id)
        return {step: db.json_value(status) for step, status in rows}

    def queued_tasks(self, execution_id: str) -> dict[tuple[str, str], int]:
        rows = self._db.fetch_all("queued_tasks", {"execution_id": execution_id})
        return {(step, pool): int(count) for step, pool, count in rows}
