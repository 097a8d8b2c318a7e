"""State gauges read from the store when Prometheus scrapes (a server, or `noetl run`).

Counts of things that exist right now (tasks in the queue, running executions, parked
steps, live workers) cannot be kept by one process's increments: another server, a
worker's continuation or a restart would change them behind its back. The store knows
them; `Store.stats` and `Store.list_workers` answer with a few grouped queries per scrape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from noetl.store.base import Store

log = logging.getLogger("noetl.observability")

# Pools whose queue gauges are exported even when empty (a gauge that vanishes when it
# reaches zero reads as "no data" on a dashboard, and an alert on it cannot resolve).
DEFAULT_POOLS = ("default",)

# A worker whose last heartbeat is older than this is not exported any more (it was
# killed without being marked stopped; its stall alert has fired for this long).
WORKER_WINDOW_S = 3600.0


class StoreGauges(Collector):
    """A prometheus_client collector of the store's state gauges."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float] = time.time,
        worker_window_s: float = WORKER_WINDOW_S,
    ) -> None:
        self.store = store
        self.clock = clock
        self.worker_window_s = worker_window_s

    def describe(self) -> list[Metric]:
        return []  # not queried at registration; the names are in metrics.STORE_GAUGE_NAMES

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self.store.stats()
            workers = self.store.list_workers()
        except Exception as exc:  # a scrape must answer even when the database does not
            log.warning("store gauges unavailable: %s", exc)
            return
        now = self.clock()

        inflight = GaugeMetricFamily(
            "noetl_task_queue_inflight",
            "Tasks enqueued and not yet acknowledged (queued or leased)",
            labels=["pool"],
        )
        tasks = GaugeMetricFamily(
            "noetl_task_queue_tasks", "Tasks in the queue by status", labels=["pool", "status"]
        )
        oldest = GaugeMetricFamily(
            "noetl_task_queue_oldest_seconds",
            "How long the oldest due task of the pool has waited for a worker",
            labels=["pool"],
        )
        per_pool: dict[str, int] = dict.fromkeys(DEFAULT_POOLS, 0)
        per_pool.update((worker.pool, 0) for worker in workers if worker.status != "stopped")
        for (pool, status), (count, due) in sorted(stats.tasks.items()):
            tasks.add_metric([pool, status], count)
            per_pool[pool] = per_pool.get(pool, 0) + count
            if status == "queued":
                oldest.add_metric([pool], 0.0 if due is None else max(now - due, 0.0))
        for pool, count in sorted(per_pool.items()):
            inflight.add_metric([pool], count)
        yield inflight
        yield tasks
        yield oldest

        yield from _execution_counters(stats.executions)

        running = GaugeMetricFamily(
            "noetl_executions_running", "Executions running", labels=["workflow"]
        )
        progress = GaugeMetricFamily(
            "noetl_execution_progress_age_seconds",
            "Seconds since the least recently progressed running execution committed an event",
            labels=["workflow"],
        )
        for workflow, (count, updated) in sorted(stats.running.items()):
            running.add_metric([workflow], count)
            progress.add_metric([workflow], max(now - updated, 0.0))
        yield running
        yield progress

        parked = GaugeMetricFamily(
            "noetl_steps_parked",
            "Steps of running executions waiting on a false `when` gate",
            labels=["workflow"],
        )
        for workflow, count in sorted(stats.parked.items()):
            parked.add_metric([workflow], count)
        yield parked

        count, created = stats.inputs
        yield GaugeMetricFamily(
            "noetl_inbox_inputs", "Inputs (outcomes, cancels) waiting for a server", value=count
        )
        yield GaugeMetricFamily(
            "noetl_inbox_oldest_seconds",
            "Age of the oldest input waiting for a server",
            value=0.0 if created is None else max(now - created, 0.0),
        )

        beats = GaugeMetricFamily(
            "noetl_worker_heartbeat_timestamp",
            "Unix time of each live worker's last heartbeat (from the worker table)",
            labels=["worker_id", "pool"],
        )
        for worker in workers:
            if worker.status != "stopped" and now - worker.heartbeat_at < self.worker_window_s:
                beats.add_metric([worker.worker_id, worker.pool], worker.heartbeat_at)
        yield beats


def _execution_counters(executions: Mapping[tuple[str, str], int]) -> Iterator[Metric]:
    """Executions started and finished, counted from the execution table: an execution
    may be started by a worker (a child playbook) and finished by a worker's continuation,
    which no server sees, so the counts a server exports come from the database."""
    started = CounterMetricFamily(
        "noetl_executions_started", "Executions started", labels=["workflow"]
    )
    completed = CounterMetricFamily(
        "noetl_executions_completed",
        "Executions finished, by status (ok|fail|canceled)",
        labels=["workflow", "status"],
    )
    per_workflow: dict[str, int] = {}
    for (workflow, status), count in sorted(executions.items()):
        per_workflow[workflow] = per_workflow.get(workflow, 0) + count
        if status != "running":
            completed.add_metric([workflow, status], count)
    for workflow, count in per_workflow.items():
        started.add_metric([workflow], count)
    yield started
    yield completed
