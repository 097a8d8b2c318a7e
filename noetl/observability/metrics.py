"""Prometheus metrics of NoETL (seed 000, 8.1): names, labels and buckets, in one registry
per process (`Metrics`), so tests can build several and nothing is global.

Values come from observers (`noetl.observability.metrics_observer`), not from calls spread
over the code; state gauges (queue depth, running executions, parked steps, worker
heartbeats) are read from the store when scraped (`noetl.observability.store_gauges`).
docs/operations.md ("Metrics") describes every metric.

Label children are cached in plain dicts (`Family.child`): the hot path costs a dict
lookup and an increment, not prometheus_client's label validation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import disable_created_metrics as _disable_created

__all__ = [
    "ALL_METRIC_NAMES",
    "QUEUE_DELAY_BUCKETS",
    "SINK_BUCKETS",
    "STEP_BUCKETS",
    "STORE_GAUGE_NAMES",
    "TASK_BUCKETS",
    "Family",
    "Metrics",
]

# seed 000, 8.1
STEP_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
SINK_BUCKETS = (0.01, 0.05, 0.1, 0.2, 0.5, 1, 2)
# The union of the per-kind buckets of 8.1 (http 0.05-5, db 0.01-2, python 0.1-30): a
# histogram has one set of buckets for all its label values.
TASK_BUCKETS = (0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30)
QUEUE_DELAY_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300)
EXECUTION_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)

M = TypeVar("M", Counter, Histogram, Gauge)


class Family(Generic[M]):
    """A labelled metric with its children cached by label values."""

    __slots__ = ("_children", "_lock", "metric")

    def __init__(self, metric: M) -> None:
        self.metric: M = metric
        self._children: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()

    def child(self, *labels: str) -> Any:
        """The child of these label values (created once)."""
        found = self._children.get(labels)
        if found is None:
            with self._lock:
                found = self._children.get(labels)
                if found is None:
                    found = self.metric.labels(*labels)
                    self._children[labels] = found
        return found


class Metrics:
    """Every metric a NoETL process records, registered in `registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # `_created` series double the output and nobody graphs them.
        _disable_created()  # type: ignore[no-untyped-call]
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry

        def counter(name: str, doc: str, labels: Sequence[str]) -> Family[Counter]:
            return Family(Counter(name, doc, labels, registry=r))

        def histogram(
            name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]
        ) -> Family[Histogram]:
            return Family(Histogram(name, doc, labels, buckets=buckets, registry=r))

        # --- decisions (server, embedded runtime, a worker's continuation) --------------
        self.execution_duration = histogram(
            "noetl_execution_duration_seconds",
            "Execution wall-clock time, start to finish",
            ["workflow", "status"],
            EXECUTION_BUCKETS,
        )
        self.step_calls = counter(
            "noetl_step_calls_total",
            "Times a step was called (it may be parked)",
            ["workflow", "step"],
        )
        self.step_runs = counter(
            "noetl_step_runs_total", "Times a step actually started", ["workflow", "step"]
        )
        self.step_completed = counter(
            "noetl_step_completed_total",
            "Steps finished, by outcome (ok: true|false)",
            ["workflow", "step", "ok"],
        )
        self.step_duration = histogram(
            "noetl_step_duration_seconds",
            "Step wall-clock duration (dispatch to done)",
            ["workflow", "step"],
            STEP_BUCKETS,
        )
        self.loop_items = counter(
            "noetl_loop_items_total", "Loop items planned", ["workflow", "step"]
        )
        self.loop_completed = counter(
            "noetl_loop_completed_total",
            "Loop items finished, by outcome (ok: true|false)",
            ["workflow", "step", "ok"],
        )
        self.sink_dispatch = counter(
            "noetl_sink_dispatch_total",
            "Sink writes reported with task outcomes",
            ["sink", "workflow", "step"],
        )
        self.sink_duration = histogram(
            "noetl_sink_duration_seconds",
            "Sink write duration, retries included",
            ["sink", "workflow", "step"],
            SINK_BUCKETS,
        )
        self.when_eval = counter(
            "noetl_when_eval_total",
            "`when` gates evaluated when a step was called or woken (outcome: true|false|error)",
            ["workflow", "step", "outcome"],
        )
        self.edge_eval = counter(
            "noetl_edge_eval_total",
            "`next` edges evaluated (outcome: taken|skipped|error)",
            ["workflow", "from", "to", "outcome"],
        )
        self.task_retries = counter(
            "noetl_task_retries_total",
            "Task attempts scheduled again, by reason (transient|failed|retry_when)",
            ["workflow", "step", "reason"],
        )
        self.dlq = counter(
            "noetl_dlq_total",
            "Tasks that failed for good (fatal error, retries exhausted, worker lost): "
            "dead letters, by tool kind and the sink that failed them (empty if none)",
            ["kind", "sink"],
        )
        self.plan_too_complex = counter(
            "noetl_plan_too_complex_total",
            "Executions started whose plan scored complexity.warn or more (seed 002)",
            ["workflow"],
        )
        self.dlq_too_complex = counter(
            "noetl_dlq_too_complex_total",
            "Dead letters of executions whose plan scored complexity.warn or more",
            ["workflow"],
        )
        # --- workers (and the embedded runtime's worker threads) ----------------------
        self.worker_tasks_started = counter(
            "noetl_worker_tasks_started_total", "Tasks started by workers", ["kind", "pool"]
        )
        self.worker_tasks_completed = counter(
            "noetl_worker_tasks_completed_total",
            "Tasks finished by workers (ok: true|false)",
            ["kind", "pool", "ok"],
        )
        self.worker_task_duration = histogram(
            "noetl_worker_task_duration_seconds",
            "Task run time on the worker, tool and sinks",
            ["kind"],
            TASK_BUCKETS,
        )
        self.queue_delay = histogram(
            "noetl_task_queue_delay_seconds",
            "Time a task waited in the queue, from due (enqueued, or its retry delay over) "
            "to claimed",
            ["pool"],
            QUEUE_DELAY_BUCKETS,
        )
        self.reports = counter(
            "noetl_worker_reports_total",
            "Task outcomes by path: continued (decided on the worker), inbox, refused "
            "(lease lost meanwhile), lost (not reported)",
            ["pool", "path"],
        )
        self.plugin_errors = counter(
            "noetl_plugin_errors_total",
            "Failed task outcomes by tool kind and error class",
            ["kind", "error_class"],
        )
        self.sink_tasks_completed = counter(
            "noetl_sink_tasks_completed_total",
            "Sink writes finished on workers (ok: true|false)",
            ["sink", "ok"],
        )
        self.sink_retries = counter(
            "noetl_sink_retries_total", "Sink write attempts after the first", ["sink", "sink_type"]
        )
        # --- retention (the server's job, noetl.runtime.retention) ----------------------
        self.pruned_rows = counter(
            "noetl_retention_pruned_rows_total",
            "Rows deleted by retention, by table",
            ["table"],
        )
        self.pruned_executions = Counter(
            "noetl_retention_pruned_executions_total",
            "Finished executions whose history retention deleted (tombstones made)",
            registry=r,
        )
        self.last_prune = Gauge(
            "noetl_retention_last_prune_timestamp_seconds",
            "When this process last completed a retention pass (epoch seconds; 0: never)",
            registry=r,
        )
        self.retention_interval = Gauge(
            "noetl_retention_interval_seconds",
            "Seconds between the retention job's passes in this process (0: the job is off)",
            registry=r,
        )
        # --- schedules (the scheduler loop of `noetl server start` / `noetl ui`) -----------
        self.schedule_ticks = counter(
            "noetl_schedule_ticks_total",
            "Ticks of schedules decided by this process, by outcome (started|skipped|"
            "buffered|failed|missed: dropped by the catch-up policy)",
            ["schedule", "outcome"],
        )
        self.schedule_tick_lag = Family(
            Gauge(
                "noetl_schedule_tick_lag_seconds",
                "How late the schedule's last tick started: its execution's start minus the "
                "tick's time",
                ["schedule"],
                registry=r,
            )
        )
        self._heartbeat: Family[Gauge] | None = None
        self._heartbeat_lock = threading.Lock()

    @property
    def worker_heartbeat(self) -> Family[Gauge]:
        """`noetl_worker_heartbeat_timestamp` of this worker process. Registered on first
        use: a server exports the same name for every worker, read from the database
        (`store_gauges`), and one registry must not hold a name twice."""
        if self._heartbeat is None:
            with self._heartbeat_lock:
                if self._heartbeat is None:
                    self._heartbeat = Family(
                        Gauge(
                            "noetl_worker_heartbeat_timestamp",
                            "Unix time of the worker's last recorded heartbeat",
                            ["worker_id", "pool"],
                            registry=self.registry,
                        )
                    )
        return self._heartbeat


# Names of the metrics read from the store when scraped (store_gauges): state gauges, and
# the execution counters, which only the database knows whole.
STORE_GAUGE_NAMES = (
    "noetl_executions_started_total",
    "noetl_executions_completed_total",
    "noetl_task_queue_inflight",
    "noetl_task_queue_tasks",
    "noetl_task_queue_oldest_seconds",
    "noetl_executions_running",
    "noetl_execution_progress_age_seconds",
    "noetl_steps_parked",
    "noetl_steps_parked_age_seconds",
    "noetl_inbox_inputs",
    "noetl_inbox_oldest_seconds",
    "noetl_worker_heartbeat_timestamp",
)

# Every metric family NoETL exports (without the _bucket/_sum/_count suffixes).
ALL_METRIC_NAMES = frozenset(
    {
        "noetl_execution_duration_seconds",
        "noetl_step_calls_total",
        "noetl_step_runs_total",
        "noetl_step_completed_total",
        "noetl_step_duration_seconds",
        "noetl_loop_items_total",
        "noetl_loop_completed_total",
        "noetl_sink_dispatch_total",
        "noetl_sink_duration_seconds",
        "noetl_when_eval_total",
        "noetl_edge_eval_total",
        "noetl_task_retries_total",
        "noetl_dlq_total",
        "noetl_plan_too_complex_total",
        "noetl_dlq_too_complex_total",
        "noetl_worker_tasks_started_total",
        "noetl_worker_tasks_completed_total",
        "noetl_worker_task_duration_seconds",
        "noetl_task_queue_delay_seconds",
        "noetl_worker_reports_total",
        "noetl_plugin_errors_total",
        "noetl_sink_tasks_completed_total",
        "noetl_sink_retries_total",
        "noetl_retention_pruned_rows_total",
        "noetl_retention_pruned_executions_total",
        "noetl_retention_last_prune_timestamp_seconds",
        "noetl_retention_interval_seconds",
        "noetl_schedule_ticks_total",
        "noetl_schedule_tick_lag_seconds",
        *STORE_GAUGE_NAMES,
    }
)
