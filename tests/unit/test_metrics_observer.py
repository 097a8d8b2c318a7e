"""Metrics derived from committed events and worker hooks (no I/O: the pure engine, a
fresh registry, the text a scrape would return, parsed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine_harness import Harness, TaskFailure
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from noetl.core import Decision, Event, Outcome, Task
from noetl.observability.metrics import (
    ALL_METRIC_NAMES,
    STEP_BUCKETS,
    STORE_GAUGE_NAMES,
    TASK_BUCKETS,
    Metrics,
)
from noetl.observability.metrics_observer import MetricsObserver

FLOW = """
- step: start
  next:
    - step: items
    - step: gated
    - step: never
    - step: nowhere
      when: "{{ false }}"
- step: items
  loop: {collection: "{{ [1, 2, 3] }}", element: n, mode: parallel}
  tool: {kind: python, code: pass}
  result: {collect: {into: all}}
- step: gated
  when: "{{ done('items') }}"
  tool: {kind: noop}
  next: flaky
- step: never
  when: "{{ false }}"
  tool: {kind: noop}
- step: nowhere
  tool: {kind: noop}
- step: flaky
  tool: {kind: python, code: pass}
  retry: {max_attempts: 2, initial_delay: 0}
"""


@dataclass
class Observed(Harness):
    """The harness, with every decision committed to an observer."""

    observer: MetricsObserver | None = None

    def _absorb(self, decision: Decision) -> Decision:
        result = super()._absorb(decision)
        if self.observer is not None:
            self.observer.committed(self.engine.graph, self.state, decision.events)
        return result


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    text = generate_latest(metrics.registry).decode()
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(metrics: Metrics, name: str, **labels: str) -> float:
    return samples(metrics).get((name, tuple(sorted(labels.items()))), 0.0)


def run_flow(*, fail_item: bool = False) -> tuple[Metrics, Observed]:
    metrics = Metrics()
    h = Observed.from_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: flow}\nworkflow:\n"
        + "\n".join("  " + line for line in FLOW.strip().splitlines())
        + "\n"
    )
    h.observer = MetricsObserver(metrics, pool="p1")
    calls = {"flaky": 0}

    def item(task: Task) -> Any:
        if fail_item and task.index == 1:
            raise TaskFailure("bad item", "ValueError")
        return task.index

    def flaky(task: Task) -> Any:
        calls["flaky"] += 1
        raise TaskFailure("connection reset", "ConnectionError", retryable=True)

    h.handlers = {"items": item, "flaky": flaky}
    h.start()
    h.run()
    return metrics, h


def test_execution_step_loop_gate_and_edge_metrics_follow_the_events() -> None:
    metrics, h = run_flow()
    wf = {"workflow": "flow"}

    # executions started and finished are read from the database (store_gauges)
    assert ("noetl_executions_started_total", (("workflow", "flow"),)) not in samples(metrics)
    assert value(metrics, "noetl_execution_duration_seconds_count", **wf, status="fail") == 1
    for step in ("start", "items", "gated", "never", "flaky"):
        assert value(metrics, "noetl_step_calls_total", **wf, step=step) == 1, step
    # `never` was called but its gate stayed false: it never ran
    assert value(metrics, "noetl_step_runs_total", **wf, step="never") == 0
    assert value(metrics, "noetl_step_runs_total", **wf, step="items") == 1
    assert value(metrics, "noetl_loop_items_total", **wf, step="items") == 3
    assert value(metrics, "noetl_loop_completed_total", **wf, step="items", ok="true") == 3
    # gated: parked once (false), woken once (true); never: false once
    assert value(metrics, "noetl_when_eval_total", **wf, step="gated", outcome="false") == 1
    assert value(metrics, "noetl_when_eval_total", **wf, step="gated", outcome="true") == 1
    assert value(metrics, "noetl_when_eval_total", **wf, step="never", outcome="false") == 1
    assert value(metrics, "noetl_edge_eval_total", **wf, **{"from": "start", "to": "items"},
                 outcome="taken") == 1  # fmt: skip
    assert value(metrics, "noetl_edge_eval_total", **wf, **{"from": "start", "to": "nowhere"},
                 outcome="skipped") == 1  # fmt: skip
    assert value(metrics, "noetl_step_calls_total", **wf, step="nowhere") == 0
    assert value(metrics, "noetl_edge_eval_total", **wf, **{"from": "gated", "to": "flaky"},
                 outcome="taken") == 1  # fmt: skip
    # flaky: a transient failure, retried once, then exhausted: one retry, one dead letter
    assert (
        value(metrics, "noetl_task_retries_total", **wf, step="flaky", reason="retry_when")
        + (value(metrics, "noetl_task_retries_total", **wf, step="flaky", reason="transient"))
        == 1
    )
    assert value(metrics, "noetl_dlq_total", kind="python", sink="") == 1
    assert value(metrics, "noetl_step_completed_total", **wf, step="flaky", ok="false") == 1
    assert value(metrics, "noetl_step_completed_total", **wf, step="items", ok="true") == 1
    # the harness clock moves 1 s per decision: `items` ran from t=0 to t=3
    items = h.state.steps["items"]
    assert items.started_at is not None and items.finished_at is not None
    duration = items.finished_at - items.started_at
    assert value(metrics, "noetl_step_duration_seconds_sum", **wf, step="items") == duration
    assert value(metrics, "noetl_step_duration_seconds_count", **wf, step="items") == 1


def test_a_failed_item_without_retry_is_a_dead_letter_and_a_failed_loop_item() -> None:
    metrics, _ = run_flow(fail_item=True)
    wf = {"workflow": "flow"}
    assert value(metrics, "noetl_loop_completed_total", **wf, step="items", ok="false") == 1
    assert value(metrics, "noetl_loop_completed_total", **wf, step="items", ok="true") == 2
    # ValueError is not transient and the step has no retry: it fails for good at once
    assert value(metrics, "noetl_dlq_total", kind="python", sink="") == 1
    assert value(metrics, "noetl_task_retries_total", **wf, step="items", reason="transient") == 0


def test_a_gate_that_fails_to_render_counts_as_an_error() -> None:
    metrics = Metrics()
    h = Observed.of(
        """
        - step: start
          next: [broken]
        - step: broken
          when: "{{ missing.attr }}"
          tool: {kind: noop}
        """,
        start=False,
        check_names=False,
    )
    h.observer = MetricsObserver(metrics)
    h.start()
    h.run()
    parked = h.of_type("step.parked", "broken")
    assert len(parked) == 1 and "when_error" in parked[0].payload
    labels = {"workflow": "test", "step": "broken"}
    assert value(metrics, "noetl_when_eval_total", **labels, outcome="error") == 1
    assert value(metrics, "noetl_when_eval_total", **labels, outcome="false") == 0


def test_worker_hooks_count_tasks_errors_sinks_and_queue_delay() -> None:
    metrics = Metrics()
    observer = MetricsObserver(metrics, pool="p1")
    task = Task("e1.s", "e1", "s", "http", {}, {}, {}, "e1:s")
    observer.claimed(task, 0.2)
    observer.claimed(task, None)  # unknown: not observed
    observer.tool_started(task)
    observer.tool_finished(task, Outcome("e1.s", ok=False, error_type="HttpError"), 0.3)
    sink = {"id": "out", "kind": "file"}
    observer.sink_finished(task, sink, {"id": "out", "kind": "file", "status": "ok", "attempts": 3})
    observer.reported(task, Outcome("e1.s", ok=False), "inbox")
    observer.heartbeat("w1", "p1", 1234.5)

    assert value(metrics, "noetl_worker_tasks_started_total", kind="http", pool="p1") == 1
    assert value(metrics, "noetl_worker_tasks_completed_total", kind="http", pool="p1",
                 ok="false") == 1  # fmt: skip
    assert value(metrics, "noetl_worker_task_duration_seconds_sum", kind="http") == 0.3
    assert value(metrics, "noetl_worker_task_duration_seconds_bucket", kind="http", le="0.5") == 1
    assert value(metrics, "noetl_worker_task_duration_seconds_bucket", kind="http", le="0.2") == 0
    assert value(metrics, "noetl_plugin_errors_total", kind="http", error_class="HttpError") == 1
    assert value(metrics, "noetl_sink_tasks_completed_total", sink="out", ok="true") == 1
    assert value(metrics, "noetl_sink_retries_total", sink="out", sink_type="file") == 2
    assert value(metrics, "noetl_task_queue_delay_seconds_count", pool="p1") == 1
    assert value(metrics, "noetl_worker_reports_total", pool="p1", path="inbox") == 1
    assert value(metrics, "noetl_worker_heartbeat_timestamp", worker_id="w1", pool="p1") == 1234.5


def test_buckets_and_names_are_the_documented_ones() -> None:
    metrics = Metrics()
    observer = MetricsObserver(metrics)
    task = Task("e1.s", "e1", "s", "python", {}, {}, {}, "e1:s")
    observer.tool_finished(task, Outcome("e1.s", ok=True), 0.01)
    observer.heartbeat("w", "default", 1.0)
    bounds = {
        float(dict(labels)["le"])
        for (name, labels) in samples(metrics)
        if name == "noetl_worker_task_duration_seconds_bucket"
    }
    assert bounds - {float("inf")} == {float(b) for b in TASK_BUCKETS}
    assert STEP_BUCKETS == (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
    text = generate_latest(metrics.registry).decode()
    families = {f.name for f in text_string_to_metric_families(text)}
    exported = {f + "_total" if f + "_total" in ALL_METRIC_NAMES else f for f in families}
    assert exported <= ALL_METRIC_NAMES
    # every event-driven metric is registered (the state gauges and the execution counters
    # come from the store)
    from_store = set(STORE_GAUGE_NAMES) - {"noetl_worker_heartbeat_timestamp"}  # a worker's too
    assert exported == ALL_METRIC_NAMES - from_store
    # 24 of decisions and workers, 4 of retention, 2 of schedules
    assert len(exported) == 30


def test_two_registries_do_not_share_values() -> None:
    first, second = Metrics(), Metrics()
    task = Task("e1.s", "e1", "s", "noop", {}, {}, {}, "e1:s")
    MetricsObserver(first).tool_started(task)
    assert value(first, "noetl_worker_tasks_started_total", kind="noop", pool="default") == 1
    assert value(second, "noetl_worker_tasks_started_total", kind="noop", pool="default") == 0


def test_a_broken_event_does_not_reach_the_runtime() -> None:
    metrics = Metrics()
    h = Observed.of("- step: start\n  tool: {kind: noop}", start=False)
    observer = MetricsObserver(metrics)
    h.start()
    # items that are not a list: an event the engine never emits; nothing raises
    broken = Event(99, "loop.started", "e1", 0.0, "start", {"items": 5})
    observer.committed(h.engine.graph, h.state, [broken])
    # and the observer goes on recording
    observer.committed(h.engine.graph, h.state, h.events)
    assert value(metrics, "noetl_step_calls_total", workflow="test", step="start") == 1
