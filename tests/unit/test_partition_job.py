"""The server's partition job (noetl.runtime.partitions) and `db.partition_days`, on the
memory store (PostgreSQL's side: tests/integration/test_pg_partitions.py)."""

from __future__ import annotations

import logging
import threading

import pytest

from noetl.config import load_settings
from noetl.errors import ConfigError
from noetl.observability.logging import FIELDS_ATTR
from noetl.runtime.partitions import PartitionJob
from noetl.store.memory import MemoryStore
from noetl.store.records import PartitionReport


def test_partition_days_default_environment_and_bounds() -> None:
    assert load_settings(None, {}).db.partition_days == 7
    assert load_settings(None, {"NOETL_DB_PARTITION_DAYS": "1"}).db.partition_days == 1
    with pytest.raises(ConfigError, match=r"db\.partition_days"):
        load_settings(None, {"NOETL_DB_PARTITION_DAYS": "0"})


class Recording(MemoryStore):
    """A memory store that reports a made partition and keeps the arguments it got."""

    def __init__(self, fail_first: bool = False, stop: threading.Event | None = None) -> None:
        super().__init__()
        self.calls: list[tuple[int, int]] = []
        self.fail_first = fail_first
        self.stop = stop

    def rotate_partitions(self, *, period_days: int, ahead_days: int) -> PartitionReport:
        self.calls.append((period_days, ahead_days))
        if self.fail_first and len(self.calls) == 1:
            raise RuntimeError("database blip")
        if self.stop is not None and len(self.calls) == 3:
            self.stop.set()
        super().rotate_partitions(period_days=period_days, ahead_days=ahead_days)
        return PartitionReport(made=(f"event_log_p{len(self.calls)}",))


def test_a_pass_asks_for_two_periods_ahead_and_logs_what_it_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Recording()
    with caplog.at_level(logging.INFO, logger="noetl.partitions"):
        report = PartitionJob(store, period_days=3).run_once()
    assert store.calls == [(3, 6)]
    assert report.made == ("event_log_p1",)
    passes = [r for r in caplog.records if r.getMessage() == "partitions_pass"]
    (event,) = [getattr(r, FIELDS_ATTR) for r in passes]
    assert event["made"] == ["event_log_p1"] and event["dropped"] == []


def test_the_memory_store_has_nothing_to_make_and_refuses_a_period_under_a_day() -> None:
    assert PartitionJob(MemoryStore(), period_days=7).run_once() == PartitionReport()
    with pytest.raises(ValueError, match="period_days"):
        MemoryStore().rotate_partitions(period_days=0, ahead_days=1)


def test_the_job_runs_until_stopped_and_survives_a_failed_pass() -> None:
    stop = threading.Event()
    store = Recording(fail_first=True, stop=stop)
    job = PartitionJob(store, period_days=1, interval_s=0.01)
    thread = threading.Thread(target=job.serve, args=(stop,))
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive() and len(store.calls) == 3
