"""The memory adapter's schedules (SQLite and PostgreSQL: `noetl.store.managers.schedules`)."""

from __future__ import annotations

import copy
import dataclasses
import threading

from noetl.store._rows import check_page
from noetl.store.records import Clock, ScheduleRecord, TickRecord, TickStatus


class MemorySchedules:
    """`ScheduleStore` in dicts, timed by the store's clock; one lock makes a claim atomic."""

    def __init__(self, clock: Clock) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._schedules: dict[str, ScheduleRecord] = {}
        self._ticks: dict[tuple[str, int], TickRecord] = {}
        self._deliveries: dict[tuple[str, str], str] = {}

    def put(self, record: ScheduleRecord) -> ScheduleRecord:
        with self._lock:
            now = self._clock()
            kept = self._schedules.get(record.name)
            stored = dataclasses.replace(
                record,
                spec=copy.deepcopy(record.spec),
                paused=record.paused if kept is None else kept.paused,
                token_hash=None if kept is None else kept.token_hash,
                token_sealed=None if kept is None else kept.token_sealed,
                created_at=now if kept is None else kept.created_at,
                updated_at=now,
            )
            self._schedules[record.name] = stored
            return dataclasses.replace(stored, spec=copy.deepcopy(stored.spec))

    def get(self, name: str) -> ScheduleRecord | None:
        with self._lock:
            kept = self._schedules.get(name)
        return None if kept is None else dataclasses.replace(kept, spec=copy.deepcopy(kept.spec))

    def all(self) -> list[ScheduleRecord]:
        with self._lock:
            names = sorted(self._schedules)
        return [s for s in (self.get(name) for name in names) if s is not None]

    def set_paused(self, name: str, paused: bool) -> bool:
        with self._lock:
            kept = self._schedules.get(name)
            if kept is None:
                return False
            self._schedules[name] = dataclasses.replace(
                kept, paused=paused, updated_at=self._clock()
            )
            return True

    def delete(self, name: str) -> bool:
        with self._lock:
            for key in [k for k in self._ticks if k[0] == name]:
                del self._ticks[key]
            for delivery in [k for k in self._deliveries if k[0] == name]:
                del self._deliveries[delivery]
            return self._schedules.pop(name, None) is not None

    def set_token(self, name: str, token_hash: str | None, *, sealed: str | None = None) -> bool:
        with self._lock:
            kept = self._schedules.get(name)
            if kept is None:
                return False
            self._schedules[name] = dataclasses.replace(
                kept, token_hash=token_hash, token_sealed=sealed, updated_at=self._clock()
            )
            return True

    def claim_delivery(self, schedule: str, key: str, execution_id: str) -> tuple[str, bool]:
        with self._lock:
            kept = self._deliveries.setdefault((schedule, key), execution_id)
        return kept, kept == execution_id

    def claim_tick(self, tick: TickRecord) -> bool:
        key = (tick.schedule, tick.tick_ms)
        with self._lock:
            if key in self._ticks:
                return False
            now = self._clock()
            self._ticks[key] = dataclasses.replace(
                tick, status=TickStatus(tick.status), claimed_at=now, updated_at=now
            )
            return True

    def last_tick(self, schedule: str, *, manual: bool = False) -> TickRecord | None:
        with self._lock:
            mine = [t for (s, _), t in self._ticks.items() if s == schedule and t.manual == manual]
        return max(mine, key=lambda t: t.tick_ms, default=None)

    def ticks(self, schedule: str, *, limit: int = 20) -> list[TickRecord]:
        check_page(limit)
        with self._lock:
            mine = [t for (s, _), t in self._ticks.items() if s == schedule]
        return sorted(mine, key=lambda t: t.tick_ms, reverse=True)[:limit]

    def ticks_with(self, status: TickStatus, *, limit: int = 100) -> list[TickRecord]:
        check_page(limit)
        with self._lock:
            found = [t for t in self._ticks.values() if t.status == status]
        return sorted(found, key=lambda t: t.tick_ms)[:limit]

    def move_tick(
        self,
        schedule: str,
        tick_ms: int,
        status: TickStatus,
        *,
        expect: TickStatus,
        error: str | None = None,
    ) -> bool:
        key = (schedule, tick_ms)
        with self._lock:
            kept = self._ticks.get(key)
            if kept is None or kept.status != expect:
                return False
            self._ticks[key] = dataclasses.replace(
                kept, status=TickStatus(status), error=error, updated_at=self._clock()
            )
            return True
