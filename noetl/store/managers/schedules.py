"""Schedules and their claimed ticks (`store.schedules`) over a connector.

The exactly-once of a tick is the table's key: `claim_tick` is one `INSERT ... ON
CONFLICT DO NOTHING`, so of any number of servers claiming one tick at once, the database
lets exactly one row in, and the caller whose statement wrote it owns the tick."""

from __future__ import annotations

from noetl.store._json import dumps, loads
from noetl.store._rows import check_page
from noetl.store.connector import Connector, Row
from noetl.store.records import ScheduleRecord, TickRecord, TickStatus


class Schedules:
    """`ScheduleStore` over a connector."""

    def __init__(self, db: Connector) -> None:
        self._db = db

    def _schedule(self, row: Row) -> ScheduleRecord:
        name, path, source, spec, paused, created_at, updated_at, token_hash, sealed = row
        epoch = self._db.epoch
        return ScheduleRecord(
            name,
            path,
            loads(spec),
            source,
            bool(paused),
            epoch(created_at),
            epoch(updated_at),
            token_hash,
            sealed,
        )

    def _tick(self, row: Row) -> TickRecord:
        schedule, tick_ms, manual, status, execution_id, owner, error, claimed, updated = row
        epoch = self._db.epoch
        return TickRecord(
            schedule,
            int(tick_ms),
            TickStatus(status),
            execution_id,
            owner,
            bool(manual),
            error,
            epoch(claimed),
            epoch(updated),
        )

    def put(self, record: ScheduleRecord) -> ScheduleRecord:
        """Create or update (keeping creation time and paused state)."""
        with self._db.transaction() as tx:
            tx.execute(
                "upsert_schedule",
                {
                    "name": record.name,
                    "playbook_path": record.playbook_path,
                    "source": record.source,
                    "spec": dumps(record.spec),
                    "paused": record.paused,
                },
            )
            row = tx.fetch_one("get_schedule", {"name": record.name})
        assert row is not None
        return self._schedule(row)

    def get(self, name: str) -> ScheduleRecord | None:
        row = self._db.fetch_one("get_schedule", {"name": name})
        return None if row is None else self._schedule(row)

    def all(self) -> list[ScheduleRecord]:
        return [self._schedule(row) for row in self._db.fetch_all("list_schedules")]

    def set_paused(self, name: str, paused: bool) -> bool:
        return self._db.execute("pause_schedule", {"name": name, "paused": paused}) > 0

    def delete(self, name: str) -> bool:
        with self._db.transaction() as tx:
            tx.execute("delete_schedule_ticks", {"name": name})
            tx.execute("delete_schedule_deliveries", {"name": name})
            return tx.execute("delete_schedule", {"name": name}) > 0

    def set_token(self, name: str, token_hash: str | None, *, sealed: str | None = None) -> bool:
        params = {"name": name, "token_hash": token_hash, "token_sealed": sealed}
        return self._db.execute("set_schedule_token", params) > 0

    def claim_delivery(self, schedule: str, key: str, execution_id: str) -> tuple[str, bool]:
        """One INSERT that writes nothing when the key exists, then the id kept."""
        params = {"schedule": schedule, "key": key, "execution_id": execution_id}
        with self._db.transaction() as tx:
            if tx.execute("claim_delivery", params) > 0:
                return execution_id, True
            row = tx.fetch_one("get_delivery", params)
        assert row is not None
        return str(row[0]), False

    def claim_tick(self, tick: TickRecord) -> bool:
        """One INSERT that writes nothing when the key exists (see the module)."""
        params = {
            "schedule": tick.schedule,
            "tick_ms": tick.tick_ms,
            "manual": tick.manual,
            "status": TickStatus(tick.status).value,
            "execution_id": tick.execution_id,
            "owner": tick.owner,
            "error": tick.error,
        }
        return self._db.execute("claim_tick", params) > 0

    def last_tick(self, schedule: str, *, manual: bool = False) -> TickRecord | None:
        row = self._db.fetch_one("last_tick", {"schedule": schedule, "manual": manual})
        return None if row is None else self._tick(row)

    def ticks(self, schedule: str, *, limit: int = 20) -> list[TickRecord]:
        check_page(limit)
        rows = self._db.fetch_all("list_ticks", {"schedule": schedule, "limit": limit})
        return [self._tick(row) for row in rows]

    def ticks_with(self, status: TickStatus, *, limit: int = 100) -> list[TickRecord]:
        check_page(limit)
        rows = self._db.fetch_all(
            "ticks_by_status", {"status": TickStatus(status).value, "limit": limit}
        )
        return [self._tick(row) for row in rows]

    def move_tick(
        self,
        schedule: str,
        tick_ms: int,
        status: TickStatus,
        *,
        expect: TickStatus,
        error: str | None = None,
    ) -> bool:
        params = {
            "schedule": schedule,
            "tick_ms": tick_ms,
            "status": TickStatus(status).value,
            "expect": TickStatus(expect).value,
            "error": error,
        }
        return self._db.execute("update_tick", params) > 0
