"""Retention's settings, durations and the server's job, on the memory store with a fake
clock (the store's side is the contract suite's: tests/contract/test_retention_contract.py)."""

from __future__ import annotations

import logging
import threading

import pytest
from prometheus_client import generate_latest

from noetl.config import load_settings
from noetl.config.durations import parse_duration
from noetl.core import Event, ExecutionStatus
from noetl.errors import ConfigError
from noetl.observability.metrics import Metrics
from noetl.runtime.retention import DAY_S, RetentionJob, RetentionPolicy
from noetl.store.base import Append, ExecutionRecord
from noetl.store.memory import MemoryStore
from tests.helpers.clock import FAKE_START, FakeClock


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("45s", 45), ("2w", 14 * 86400),
     ("7", 7 * 86400), (" 1.5H ", 5400), (3, 3 * 86400)],
)  # fmt: skip
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "30x", "-1d", "0d", "d", "1 d 2h"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_retention_settings_defaults_environment_and_alias() -> None:
    settings = load_settings(None, {})
    assert settings.retention.enabled is False
    assert settings.retention.older_than_s == 30 * DAY_S
    assert (settings.retention.interval_s, settings.retention.batch) == (3600.0, 1000)
    env = {
        "NOETL_RETENTION_ENABLED": "true",
        "NOETL_RETENTION_OLDER_THAN": "12h",
        "NOETL_RETENTION_INTERVAL_S": "60",
        "NOETL_RETENTION_BATCH": "50",
    }
    custom = load_settings(None, env).retention
    assert (custom.enabled, custom.older_than_s, custom.interval_s, custom.batch) == (
        True,
        43200,
        60.0,
        50,
    )
    assert load_settings(None, {"NOETL_RETENTION_DAYS": "7"}).retention.older_than_s == 7 * DAY_S
    with pytest.raises(ConfigError, match="is not a duration"):
        load_settings(None, {"NOETL_RETENTION_OLDER_THAN": "soon"})
    with pytest.raises(ConfigError, match=r"retention\.batch"):
        load_settings(None, {"NOETL_RETENTION_BATCH": "0"})


def test_the_policy_takes_the_dead_letter_retention_from_the_dlq_settings() -> None:
    settings = load_settings(None, {"NOETL_DLQ_RETENTION_DAYS": "3"})
    policy = RetentionPolicy.of(settings)
    assert policy.dead_letters_after_s == 3 * DAY_S
    assert policy.older_than_s == 30 * DAY_S and policy.batch == 1000


def finished_store(clock: FakeClock, *ids: str) -> MemoryStore:
    store = MemoryStore(clock=clock)
    for execution_id in ids:
        record = ExecutionRecord(execution_id, "demo", None, "name: demo\n")
        start = [Event(1, "workflow.started", execution_id, 1.0, payload={})]
        store.create_execution(record, Append(execution_id, 0, start, now=clock()))
        end = [Event(2, "workflow.finished", execution_id, 2.0, payload={})]
        store.commit([Append(execution_id, 1, end, status=ExecutionStatus.OK, now=clock())])
    return store


def test_a_pass_prunes_logs_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    store = finished_store(clock, "a", "b")
    metrics = Metrics()
    policy = RetentionPolicy(older_than_s=3600, dead_letters_after_s=DAY_S, batch=1)
    job = RetentionJob(store, policy, interval_s=60, metrics=metrics, clock=clock)

    with caplog.at_level(logging.INFO, logger="noetl.retention"):
        assert job.run_once().executions == 0  # finished just now: kept
        clock.advance(3601)
        report = job.run_once()

    assert (report.executions, report.batches, report.rows["event_log"]) == (2, 2, 4)
    passes = [r for r in caplog.records if r.getMessage() == "retention_pass"]
    assert len(passes) == 2
    scrape = generate_latest(metrics.registry).decode()
    assert 'noetl_retention_pruned_rows_total{table="event_log"} 4.0' in scrape
    assert "noetl_retention_pruned_executions_total 2.0" in scrape
    last = metrics.registry.get_sample_value("noetl_retention_last_prune_timestamp_seconds")
    assert last is not None and FAKE_START + 3600 < last <= clock.now
    # what the RetentionStalled alert compares the last pass with
    assert metrics.registry.get_sample_value("noetl_retention_interval_seconds") == 60


def test_the_job_runs_until_stopped_and_survives_a_failed_pass() -> None:
    clock = FakeClock()
    calls: list[float] = []
    stop = threading.Event()

    class Flaky(MemoryStore):
        def prune(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            calls.append(clock())
            if len(calls) == 1:
                raise RuntimeError("database blip")
            if len(calls) == 3:
                stop.set()
            return super().prune(*args, **kwargs)  # type: ignore[arg-type]

    policy = RetentionPolicy(older_than_s=1, dead_letters_after_s=1)
    job = RetentionJob(Flaky(clock=clock), policy, interval_s=0.01, clock=clock)
    thread = threading.Thread(target=job.serve, args=(stop,))
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive() and len(calls) == 3
