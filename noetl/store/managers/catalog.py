"""The playbook catalog, the worker table and the counts of `Store.stats`."""

from __future__ import annotations

from noetl.core import NotFoundError
from noetl.store._rows import check_worker
from noetl.store.connector import Connector, Row
from noetl.store.records import PlaybookRecord, StoreStats, WorkerRecord


class Catalog:
    """`CatalogPort`, `WorkerRegistryPort` and `AdminPort.stats` over a connector."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def _playbook(self, row: Row) -> PlaybookRecord:
        path, version, name, text, created_at = row
        return PlaybookRecord(path, version, name, text, self._db.epoch(created_at))

    def register_playbook(self, path: str, name: str, text: str, now: float) -> PlaybookRecord:
        """A new version of `path`, unless `text` equals the latest version's."""
        with self._db.transaction() as tx:
            # Versions of one path are numbered one writer at a time.
            tx.fetch_one("lock_playbook_path", {"path": path})
            row = tx.fetch_one("latest_playbook", {"path": path})
            latest = None if row is None else self._playbook(row)
            if latest is not None and latest.text == text:
                return latest
            version = 1 if latest is None else latest.version + 1
            created_at = tx.ts(now)
            tx.execute(
                "insert_playbook",
                {
                    "path": path,
                    "version": version,
                    "name": name,
                    "text": text,
                    "created_at": created_at,
                },
            )
        return PlaybookRecord(path, version, name, text, self._db.epoch(created_at))

    def get_playbook(self, path: str, version: int | None = None) -> PlaybookRecord | None:
        if version is None:
            row = self._db.fetch_one("latest_playbook", {"path": path})
        else:
            row = self._db.fetch_one("playbook_version", {"path": path, "version": version})
        return None if row is None else self._playbook(row)

    def list_playbooks(self) -> list[PlaybookRecord]:
        return [self._playbook(row) for row in self._db.fetch_all("list_playbooks")]

    def register_worker(self, record: WorkerRecord) -> None:
        """Insert or replace the worker's row."""
        check_worker(record)
        self._db.execute(
            "upsert_worker",
            {
                "worker_id": record.worker_id,
                "pool": record.pool,
                "hostname": record.hostname,
                "pid": record.pid,
                "status": record.status,
                "started_at": self._db.ts(record.started_at),
                "heartbeat_at": self._db.ts(record.heartbeat_at),
            },
        )

    def worker_heartbeat(self, worker_id: str) -> str:
        """Stamp the worker alive (database clock) and return its status, `draining` to
        stop; NotFoundError if it is not registered."""
        with self._db.transaction() as tx:
            row = tx.fetch_one("worker_status", {"worker_id": worker_id})
            if row is None:
                raise NotFoundError(f"worker {worker_id} is not registered")
            tx.execute("worker_heartbeat", {"worker_id": worker_id})
        return str(row[0])

    def request_drain(self, pool: str | None = None) -> int:
        """Move running workers (of `pool`, or all) to draining; returns how many."""
        return self._db.execute("request_drain", {"pool": pool})

    def list_workers(self) -> list[WorkerRecord]:
        """Every registered worker, by id."""
        epoch = self._db.epoch
        return [
            WorkerRecord(worker_id, pool, hostname, pid, status, epoch(started), epoch(beat))
            for worker_id, pool, hostname, pid, status, started, beat in self._db.fetch_all(
                "list_workers"
            )
        ]

    def stats(self) -> StoreStats:
        """Counts for the metrics exporter (four grouped queries, one connection)."""
        with self._db.session() as db:
            epoch = db.epoch
            executions: dict[tuple[str, str], int] = {}
            running: dict[str, tuple[int, float]] = {}
            for name, status, count, oldest in db.fetch_all("stats_executions"):
                executions[(name, status)] = count
                if status == "running":
                    running[name] = (count, epoch(oldest))
            parked = {name: count for name, count in db.fetch_all("stats_parked")}
            tasks = {
                (pool, status): (count, None if oldest is None else epoch(oldest))
                for pool, status, count, oldest in db.fetch_all("stats_tasks")
            }
            row = db.fetch_one("stats_inputs")
        inputs = (
            (0, None) if row is None else (int(row[0]), None if row[1] is None else epoch(row[1]))
        )
        return StoreStats(
            running=running, parked=parked, tasks=tasks, inputs=inputs, executions=executions
        )
