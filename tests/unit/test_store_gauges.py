"""The state gauges a scrape reads from the store (memory store, a fixed clock)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from noetl.core import Event, ExecutionStatus, Task
from noetl.observability.store_gauges import StoreGauges
from noetl.store.base import Append, Enqueue, ExecutionRecord, StoreStats, WorkerRecord
from noetl.store.memory import MemoryStore


def scrape(collector: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_gauges_from_the_store() -> None:
    store = MemoryStore()
    record = ExecutionRecord("e1", "orders", None, "", created_at=100.0, updated_at=100.0)
    task = Task("e1.a", "e1", "a", "noop", {}, {}, {}, "e1:a")
    started = Event(1, "workflow.started", "e1", 100.0, payload={"workload": {}})
    store.create_execution(record, Append("e1", 0, [started], enqueue=[Enqueue(task)], now=100.0))
    parked = Event(2, "step.parked", "e1", 150.0, "gate")
    store.commit([Append("e1", 1, [parked], steps={"gate": {"status": "parked"}}, now=150.0)])
    for worker_id, status, beat in (("w1", "running", 990.0), ("w2", "stopped", 995.0)):
        store.register_worker(WorkerRecord(worker_id, "default", "h", 1, status, 900.0, beat))
    old = WorkerRecord("w3", "default", "h", 2, "running", 10.0, 10.0)  # gone for long
    store.register_worker(old)

    samples = scrape(StoreGauges(store, clock=lambda: 1000.0, worker_window_s=600))

    assert samples[("noetl_executions_running", (("workflow", "orders"),))] == 1
    assert samples[("noetl_execution_progress_age_seconds", (("workflow", "orders"),))] == 850
    assert samples[("noetl_steps_parked", (("workflow", "orders"),))] == 1
    assert samples[("noetl_task_queue_inflight", (("pool", "default"),))] == 1
    assert samples[("noetl_task_queue_tasks", (("pool", "default"), ("status", "queued")))] == 1
    assert ("noetl_task_queue_oldest_seconds", (("pool", "default"),)) in samples
    assert samples[("noetl_inbox_inputs", ())] == 0
    beats = {k[1]: v for k, v in samples.items() if k[0] == "noetl_worker_heartbeat_timestamp"}
    # stopped workers and workers silent for longer than the window are not exported
    assert beats == {(("pool", "default"), ("worker_id", "w1")): 990.0}


def test_execution_counters_and_empty_queues_come_from_the_store() -> None:
    store = MemoryStore()
    for index, (name, status) in enumerate(
        [("orders", "ok"), ("orders", "ok"), ("orders", "fail"), ("orders", None), ("load", "ok")]
    ):
        execution_id = f"e{index}"
        record = ExecutionRecord(execution_id, name, None, "", created_at=1.0, updated_at=1.0)
        started = Event(1, "workflow.started", execution_id, 1.0, payload={"workload": {}})
        store.create_execution(record, Append(execution_id, 0, [started], now=1.0))
        if status is not None:
            finished = Event(2, "workflow.finished", execution_id, 2.0, payload={"status": status})
            store.commit(
                [Append(execution_id, 1, [finished], status=ExecutionStatus(status), now=2.0)]
            )
    store.register_worker(WorkerRecord("w1", "etl", "h", 1, "running", 1.0, 999.0))

    samples = scrape(StoreGauges(store, clock=lambda: 1000.0))

    assert samples[("noetl_executions_started_total", (("workflow", "orders"),))] == 4
    assert samples[("noetl_executions_started_total", (("workflow", "load"),))] == 1
    completed = {
        labels: v for (name, labels), v in samples.items()
        if name == "noetl_executions_completed_total"
    }  # fmt: skip
    assert completed == {
        (("status", "fail"), ("workflow", "orders")): 1,
        (("status", "ok"), ("workflow", "load")): 1,
        (("status", "ok"), ("workflow", "orders")): 2,
    }
    # nothing queued: the queue gauges say 0 for the default pool and every live worker's
    assert samples[("noetl_task_queue_inflight", (("pool", "default"),))] == 0
    assert samples[("noetl_task_queue_inflight", (("pool", "etl"),))] == 0


class Broken:
    def stats(self) -> StoreStats:
        raise ConnectionError("database away")

    def list_workers(self) -> list[WorkerRecord]:
        return []


def test_a_scrape_answers_when_the_database_does_not() -> None:
    collector = StoreGauges(Broken())  # type: ignore[arg-type]
    assert collector.describe() == []
    assert scrape(collector) == {}
