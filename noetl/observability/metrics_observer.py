"""The observer that records metrics: committed events and worker hooks -> `Metrics`.

Server metrics are derived from committed events (each event is committed once, by one
process: a server, a worker's continuation or the embedded runtime; Prometheus sums the
processes). The executions started and finished are counted from the database instead
(`store_gauges`), so a server's scrape has them whole. Per event: one dict lookup for
its handler, then a cached child's increment.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from noetl.core import Event, EventType, Outcome, Task
from noetl.core.views import ExecutionView
from noetl.dsl.complexity import too_complex
from noetl.dsl.graph import Graph
from noetl.observability.facts import PlaybookFacts, facts_of
from noetl.observability.metrics import Metrics
from noetl.observability.observer import ReportPath

log = logging.getLogger("noetl.observability")

_Handler = Callable[[PlaybookFacts, ExecutionView, Sequence[Event], int], None]
_BOOL = {True: "true", False: "false"}


class MetricsObserver:
    """Records NoETL's metrics in `metrics`; `pool` labels the worker-side metrics."""

    def __init__(
        self, metrics: Metrics, *, pool: str = "default", complexity_warn: int | None = None
    ) -> None:
        self.metrics = metrics
        self.pool = pool
        # An execution whose plan scores this or more counts as too complex when it
        # starts and when a task of it is dead-lettered (noetl.dsl.complexity).
        self.complexity_warn = complexity_warn
        self._failed_once = False
        self._handlers: dict[str, _Handler] = {
            EventType.WORKFLOW_FINISHED: self._workflow_finished,
            EventType.STEP_CALLED: self._step_called,
            EventType.STEP_PARKED: self._step_parked,
            EventType.STEP_STARTED: self._step_started,
            EventType.STEP_FINISHED: self._step_finished,
            EventType.LOOP_STARTED: self._loop_started,
            EventType.LOOP_ITERATION_FINISHED: self._iteration_finished,
            EventType.TOOL_PROCESSED: self._tool_processed,
            EventType.NEXT_EVALUATED: self._next_evaluated,
            EventType.RETRY_STARTED: self._retry_started,
            EventType.TASK_DEAD_LETTERED: self._dead_lettered,
        }

    # --- decisions -----------------------------------------------------------------------

    def committed(self, graph: Graph, state: ExecutionView, events: Sequence[Event]) -> None:
        try:
            facts = facts_of(graph)
            handlers = self._handlers
            for index, event in enumerate(events):
                handler = handlers.get(event.type)
                if handler is not None:
                    handler(facts, state, events, index)
            self._complexity(graph, facts, state, events)
        except Exception:  # metrics must never break a runtime
            if not self._failed_once:
                self._failed_once = True
                log.exception("recording metrics of committed events failed")

    def _workflow_finished(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        event = events[i]
        status = str(event.payload.get("status"))
        if state.started_at is not None:
            self.metrics.execution_duration.child(facts.workflow, status).observe(
                max(event.ts - state.started_at, 0.0)
            )

    def _step_called(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        self.metrics.step_calls.child(facts.workflow, events[i].step or "").inc()

    def _step_parked(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        event = events[i]
        outcome = "error" if "when_error" in event.payload else "false"
        self.metrics.when_eval.child(facts.workflow, event.step or "", outcome).inc()

    def _step_started(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        event = events[i]
        step = event.step or ""
        self.metrics.step_runs.child(facts.workflow, step).inc()
        if step in facts.gated and not _compensating(events, i):
            outcome = "error" if "when_error" in event.payload else "true"
            self.metrics.when_eval.child(facts.workflow, step, outcome).inc()

    def _step_finished(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        event = events[i]
        step = event.step or ""
        ok = event.payload.get("status") == "ok"
        self.metrics.step_completed.child(facts.workflow, step, _BOOL[ok]).inc()
        run = state.steps.get(step)
        if run is not None and run.started_at is not None:
            self.metrics.step_duration.child(facts.workflow, step).observe(
                max(event.ts - run.started_at, 0.0)
            )

    def _loop_started(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        event = events[i]
        count = len(event.payload.get("items") or ())
        self.metrics.loop_items.child(facts.workflow, event.step or "").inc(count)

    def _iteration_finished(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        event = events[i]
        ok = _BOOL[bool(event.payload.get("ok"))]
        self.metrics.loop_completed.child(facts.workflow, event.step or "", ok).inc()

    def _tool_processed(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        event = events[i]
        payload = event.payload
        step = event.step or ""
        sinks = payload.get("sinks")
        if sinks:
            for summary in sinks:
                if summary.get("status") == "skipped":
                    continue
                sink = str(summary.get("id"))
                self.metrics.sink_dispatch.child(sink, facts.workflow, step).inc()
                duration = summary.get("duration_ms")
                if isinstance(duration, int | float):
                    self.metrics.sink_duration.child(sink, facts.workflow, step).observe(
                        duration / 1000
                    )

    def _dead_lettered(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        payload = events[i].payload
        kind = payload.get("kind") or facts.kinds.get(events[i].step or "", "")
        self.metrics.dlq.child(str(kind), str(payload.get("sink_id") or "")).inc()

    def _complexity(
        self, graph: Graph, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event]
    ) -> None:
        """A start, and each dead letter, of an execution too complex (one estimate)."""
        warn = self.complexity_warn
        starts = sum(1 for e in events if e.type == EventType.WORKFLOW_STARTED)
        dead = sum(1 for e in events if e.type == EventType.TASK_DEAD_LETTERED)
        if warn is None or not (starts or dead):
            return
        if too_complex(graph, state.workload, warn) is None:
            return
        if starts:
            self.metrics.plan_too_complex.child(facts.workflow).inc(starts)
        if dead:
            self.metrics.dlq_too_complex.child(facts.workflow).inc(dead)

    def _next_evaluated(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        event = events[i]
        source = event.step or ""
        for edge in event.payload.get("edges") or ():
            if edge.get("fired"):
                outcome = "taken"
            elif "error" in edge:
                outcome = "error"
            else:
                outcome = "skipped"
            self.metrics.edge_eval.child(facts.workflow, source, str(edge.get("to")), outcome).inc()

    def _retry_started(
        self, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event], i: int
    ) -> None:
        event = events[i]
        reason = str(event.payload.get("reason"))
        self.metrics.task_retries.child(facts.workflow, event.step or "", reason).inc()

    # --- workers -------------------------------------------------------------------------

    def claimed(self, task: Task, queued_s: float | None) -> None:
        if queued_s is not None:
            self.metrics.queue_delay.child(self.pool).observe(max(queued_s, 0.0))

    def tool_started(self, task: Task) -> None:
        self.metrics.worker_tasks_started.child(task.kind, self.pool).inc()

    def tool_finished(self, task: Task, outcome: Outcome, duration_s: float) -> None:
        metrics = self.metrics
        metrics.worker_tasks_completed.child(task.kind, self.pool, _BOOL[outcome.ok]).inc()
        metrics.worker_task_duration.child(task.kind).observe(duration_s)
        if not outcome.ok:
            metrics.plugin_errors.child(task.kind, outcome.error_type or "Error").inc()

    def sink_started(self, task: Task, sink: Mapping[str, Any]) -> None:
        pass

    def sink_finished(
        self, task: Task, sink: Mapping[str, Any], summary: Mapping[str, Any]
    ) -> None:
        sink_id = str(summary.get("id"))
        ok = summary.get("status") == "ok"
        self.metrics.sink_tasks_completed.child(sink_id, _BOOL[ok]).inc()
        retries = int(summary.get("attempts") or 1) - 1
        if retries > 0:
            self.metrics.sink_retries.child(sink_id, str(summary.get("kind"))).inc(retries)

    def reported(self, task: Task, outcome: Outcome, path: ReportPath) -> None:
        self.metrics.reports.child(self.pool, path).inc()

    def heartbeat(self, worker_id: str, pool: str, now: float) -> None:
        self.metrics.worker_heartbeat.child(worker_id, pool).set(now)


def _compensating(events: Sequence[Event], index: int) -> bool:
    """Whether the step.started at `index` runs a compensating step (dispatched without
    its gate, right after its `step.called` with `compensating`)."""
    before = events[index - 1] if index > 0 else None
    return (
        before is not None
        and before.type == EventType.STEP_CALLED
        and bool(before.payload.get("compensating"))
    )
