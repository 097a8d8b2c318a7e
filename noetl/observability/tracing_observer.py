"""The observer that writes spans (seed 000, 8.3) from committed events and worker hooks.

One trace per execution (ids derived, see `noetl.observability.trace_context`):

    server.execution                  root; written when `workflow.finished` commits
    ├── server.dispatch               one per task (step.started / loop.iteration.started)
    │   ├── server.when_eval          the gate of the step that dispatched the task
    │   ├── worker.plugin.<kind>      one per attempt, written by the worker that ran it
    │   └── worker.sink.<sink id>     one per sink written, by that worker
    ├── server.when_eval              a gate that parked its step, or of a step without a
    │                                 task of its own (a loop)
    └── server.route                  one per `next` edge that fired or failed to evaluate

A decision's spans are written by the process that committed it (a server, a worker's
continuation, the embedded runtime), from the events' timestamps: a dispatch span lasts
from the decision to its commit; a gate or route span is an instant of its decision. A
worker writes a task's spans when the task carries a trace context (`Task.trace`); the
execution's sampling decided that when the task was queued.

`force_sample_on_error`: when an execution that was not sampled ends `fail`, the process
that commits its end reads the execution's log and writes the spans the log describes: the
decisions' spans as above, and a plugin and sink spans per accepted outcome (timed from the
outcome's duration and the time it was accepted; attribute `noetl.reconstructed`). Nothing
else can be honest: the workers kept no spans of a task that was not traced.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.trace import SpanKind

from noetl.core import Event, EventType, Outcome, Task
from noetl.core.views import ExecutionView
from noetl.dsl.graph import Graph
from noetl.observability.facts import PlaybookFacts, facts_of
from noetl.observability.observer import ReportPath
from noetl.observability.trace_context import (
    dispatch_span_id,
    execution_span_id,
    parse_traceparent,
    plugin_span_id,
    sink_span_id,
    span_id,
    trace_id_of,
)
from noetl.observability.tracing import Tracing
from noetl.redaction import signature_of

__all__ = ["TracingObserver"]

log = logging.getLogger("noetl.observability")
LoadEvents = Callable[[str], Sequence[Event]]


class _Batch:
    """What the span handlers of one execution's events need."""

    __slots__ = ("committed_at", "execution_id", "facts", "root", "trace_id")

    def __init__(self, facts: PlaybookFacts, execution_id: str, committed_at: float | None):
        self.facts = facts
        self.execution_id = execution_id
        self.trace_id = trace_id_of(execution_id)
        self.root = execution_span_id(execution_id)
        # When the decision was committed (live); None when rebuilt from the log.
        self.committed_at = committed_at


_Handler = Callable[[_Batch, Sequence[Event], int], None]


class TracingObserver:
    """Writes the spans of traced executions to `tracing`. `load_events` reads an
    execution's log (for `force_sample_on_error`; None: not done)."""

    def __init__(
        self,
        tracing: Tracing,
        *,
        load_events: LoadEvents | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.tracing = tracing
        self.sampler = tracing.sampler
        self.load_events = load_events
        self.clock = clock
        self._failed_once = False
        self._handlers: dict[str, _Handler] = {
            EventType.STEP_STARTED: self._step_started,
            EventType.STEP_PARKED: self._step_parked,
            EventType.LOOP_ITERATION_STARTED: self._iteration_started,
            EventType.NEXT_EVALUATED: self._next_evaluated,
        }

    # --- decisions -----------------------------------------------------------------------

    def committed(self, graph: Graph, state: ExecutionView, events: Sequence[Event]) -> None:
        try:
            if self.sampler.sampled(state.execution_id, state.workload):
                batch = _Batch(facts_of(graph), state.execution_id, self.clock())
                self._spans(batch, events)
                for event in events:
                    if event.type == EventType.WORKFLOW_FINISHED:
                        self._root(batch, event, state.started_at, state.workload)
            elif self.sampler.force_on_error and _failed(events):
                self._rebuild(graph, state.execution_id)
        except Exception:  # tracing must never break a runtime
            self._failure("writing the spans of committed events failed")

    def _spans(self, batch: _Batch, events: Sequence[Event]) -> None:
        handlers = self._handlers
        for index, event in enumerate(events):
            handler = handlers.get(event.type)
            if handler is not None:
                handler(batch, events, index)

    def _root(
        self, batch: _Batch, event: Event, started_at: float | None, workload: Mapping[str, Any]
    ) -> None:
        status = event.payload.get("status")
        error = event.payload.get("error")
        self.tracing.span(
            "server.execution",
            trace_id=batch.trace_id,
            span_id=batch.root,
            parent_id=None,
            start=event.ts if started_at is None else started_at,
            end=event.ts,
            attributes={
                "execution_id": batch.execution_id,
                "workflow_ref": batch.facts.ref,
                "workflow": batch.facts.workflow,
                "workload_size": len(json.dumps(workload, default=str)),
                "status": status,
            },
            error=("ExecutionFailed", error or "failed") if status == "fail" else None,
        )

    def _dispatch(self, batch: _Batch, event: Event, task: Mapping[str, Any]) -> None:
        task_id = str(task.get("task_id"))
        self.tracing.span(
            "server.dispatch",
            trace_id=batch.trace_id,
            span_id=dispatch_span_id(task_id),
            parent_id=batch.root,
            start=event.ts,
            end=batch.committed_at,
            attributes={
                "execution_id": batch.execution_id,
                "step_id": event.step,
                "loop_index": task.get("index"),
                "tool_kind": task.get("kind"),
                "message_id": task_id,
            },
            kind=SpanKind.PRODUCER,
        )

    def _step_started(self, batch: _Batch, events: Sequence[Event], i: int) -> None:
        event = events[i]
        task = event.payload.get("task")
        if isinstance(task, Mapping):
            self._dispatch(batch, event, task)
        step = event.step or ""
        if step in batch.facts.gated and not _compensating(events, i):
            outcome = "error" if "when_error" in event.payload else "true"
            parent = (
                dispatch_span_id(str(task.get("task_id")))
                if isinstance(task, Mapping)
                else batch.root
            )
            self._when(batch, event, outcome, parent)

    def _step_parked(self, batch: _Batch, events: Sequence[Event], i: int) -> None:
        event = events[i]
        outcome = "error" if "when_error" in event.payload else "false"
        self._when(batch, event, outcome, batch.root)

    def _when(self, batch: _Batch, event: Event, outcome: str, parent: int) -> None:
        error = event.payload.get("when_error")
        self.tracing.span(
            "server.when_eval",
            trace_id=batch.trace_id,
            span_id=span_id("when", batch.execution_id, event.seq),
            parent_id=parent,
            start=event.ts,
            attributes={
                "execution_id": batch.execution_id,
                "step_id": event.step,
                "when_expr": batch.facts.when.get(event.step or ""),
                "outcome": outcome,
            },
            error=("WhenError", str(error)) if error is not None else None,
        )

    def _iteration_started(self, batch: _Batch, events: Sequence[Event], i: int) -> None:
        event = events[i]
        task = event.payload.get("task")
        if isinstance(task, Mapping):
            self._dispatch(batch, event, task)

    def _next_evaluated(self, batch: _Batch, events: Sequence[Event], i: int) -> None:
        event = events[i]
        source = event.step or ""
        conditions = batch.facts.edges.get(source, ())
        for index, edge in enumerate(event.payload.get("edges") or ()):
            error = edge.get("error")
            if not edge.get("fired") and error is None:
                continue
            self.tracing.span(
                "server.route",
                trace_id=batch.trace_id,
                span_id=span_id("route", batch.execution_id, event.seq, index),
                parent_id=batch.root,
                start=event.ts,
                attributes={
                    "execution_id": batch.execution_id,
                    "from_step": source,
                    "edge_index": index,
                    "target_step": edge.get("to"),
                    "condition": conditions[index] if index < len(conditions) else None,
                    "fired": bool(edge.get("fired")),
                },
                error=("RouteError", str(error)) if error is not None else None,
            )

    # --- force_sample_on_error -----------------------------------------------------------

    def _rebuild(self, graph: Graph, execution_id: str) -> None:
        """Write the spans of a failed execution that was not sampled, from its log."""
        if self.load_events is None:
            return
        events = list(self.load_events(execution_id))
        batch = _Batch(facts_of(graph), execution_id, None)
        self._spans(batch, events)
        tasks: dict[str, Mapping[str, Any]] = {}
        attempts: dict[str, int] = {}
        started_at: float | None = None
        workload: Mapping[str, Any] = {}
        for event in events:
            payload = event.payload
            kind = event.type
            task = payload.get("task")
            if isinstance(task, Mapping) and kind != EventType.STEP_FORCE_COMPLETED:
                tasks[str(task.get("task_id"))] = task
                attempts[str(task.get("task_id"))] = 1
            if kind == EventType.WORKFLOW_STARTED:
                started_at, workload = event.ts, payload.get("workload") or {}
            elif kind in (EventType.RETRY_STARTED, EventType.TASK_RECLAIMED):
                attempts[str(payload.get("task_id"))] = int(payload.get("attempt") or 1)
            elif kind == EventType.TOOL_PROCESSED:
                self._rebuilt_task(batch, event, tasks, attempts)
        finished = [e for e in events if e.type == EventType.WORKFLOW_FINISHED]
        if finished:
            self._root(batch, finished[-1], started_at, workload)

    def _rebuilt_task(
        self,
        batch: _Batch,
        event: Event,
        tasks: Mapping[str, Mapping[str, Any]],
        attempts: Mapping[str, int],
    ) -> None:
        payload = event.payload
        task_id = str(payload.get("task_id"))
        task = tasks.get(task_id, {})
        attempt = attempts.get(task_id, 1)
        duration = float(payload.get("duration_ms") or 0.0) / 1000
        ok = bool(payload.get("ok"))
        self.tracing.span(
            f"worker.plugin.{task.get('kind') or batch.facts.kinds.get(event.step or '', '')}",
            trace_id=batch.trace_id,
            span_id=plugin_span_id(task_id, attempt),
            parent_id=dispatch_span_id(task_id),
            start=event.ts - duration,
            end=event.ts,
            attributes={
                "execution_id": batch.execution_id,
                "step_id": event.step,
                "loop_index": task.get("index"),
                "tool_kind": task.get("kind"),
                "message_id": task_id,
                "attempt": attempt,
                "spec_signature": signature_of(task.get("spec") or {}),
                "args_signature": signature_of(task.get("args") or {}),
                "ok": ok,
                "noetl.reconstructed": True,
            },
            error=None if ok else (payload.get("error_type"), payload.get("error")),
            kind=SpanKind.CONSUMER,
        )
        for summary in payload.get("sinks") or ():
            if summary.get("status") == "skipped":
                continue
            sink_duration = float(summary.get("duration_ms") or 0.0) / 1000
            self._sink_span(
                batch.trace_id,
                task_id,
                attempt,
                {},
                summary,
                start=event.ts - sink_duration,
                end=event.ts,
                extra={"execution_id": batch.execution_id, "step_id": event.step},
                reconstructed=True,
            )

    # --- workers -------------------------------------------------------------------------

    def claimed(self, task: Task, queued_s: float | None) -> None:
        pass

    def tool_started(self, task: Task) -> None:
        pass

    def tool_finished(self, task: Task, outcome: Outcome, duration_s: float) -> None:
        if task.trace is None:
            return
        try:
            parsed = parse_traceparent(task.trace)
            if parsed is None:
                return
            trace_id, parent = parsed
            end = self.clock()
            self.tracing.span(
                f"worker.plugin.{task.kind}",
                trace_id=trace_id,
                span_id=plugin_span_id(task.task_id, task.attempt),
                parent_id=parent,
                start=end - duration_s,
                end=end,
                attributes={
                    "execution_id": task.execution_id,
                    "step_id": task.step,
                    "loop_index": task.index,
                    "tool_kind": task.kind,
                    "message_id": task.task_id,
                    "attempt": task.attempt,
                    "spec_signature": signature_of(task.spec),
                    "args_signature": signature_of(task.args),
                    "ok": outcome.ok,
                },
                error=None if outcome.ok else (outcome.error_type, outcome.error),
                kind=SpanKind.CONSUMER,
            )
        except Exception:
            self._failure("writing a plugin span failed")

    def sink_started(self, task: Task, sink: Mapping[str, Any]) -> None:
        pass

    def sink_finished(
        self, task: Task, sink: Mapping[str, Any], summary: Mapping[str, Any]
    ) -> None:
        if task.trace is None:
            return
        try:
            parsed = parse_traceparent(task.trace)
            if parsed is None:
                return
            end = self.clock()
            duration = float(summary.get("duration_ms") or 0.0) / 1000
            self._sink_span(
                parsed[0],
                task.task_id,
                task.attempt,
                sink,
                summary,
                start=end - duration,
                end=end,
                extra={"execution_id": task.execution_id, "step_id": task.step},
            )
        except Exception:
            self._failure("writing a sink span failed")

    def _sink_span(
        self,
        trace_id: int,
        task_id: str,
        attempt: int,
        sink: Mapping[str, Any],
        summary: Mapping[str, Any],
        *,
        start: float,
        end: float,
        extra: Mapping[str, Any],
        reconstructed: bool = False,
    ) -> None:
        sink_id = str(summary.get("id") or sink.get("id"))
        spec = sink.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        ok = summary.get("status") == "ok"
        attributes: dict[str, Any] = {
            **extra,
            "sink_id": sink_id,
            "sink_type": summary.get("kind") or sink.get("kind"),
            "table": _text(summary.get("table") or spec.get("table")),
            "mode": _text(summary.get("mode") or spec.get("mode")),
            "rows_written": summary.get("rows") if isinstance(summary.get("rows"), int) else None,
            "attempts": summary.get("attempts"),
            "async": bool(summary.get("async")),
            "ok": ok,
        }
        if reconstructed:
            attributes["noetl.reconstructed"] = True
        self.tracing.span(
            f"worker.sink.{sink_id}",
            trace_id=trace_id,
            span_id=sink_span_id(task_id, attempt, sink_id),
            parent_id=dispatch_span_id(task_id),
            start=start,
            end=end,
            attributes=attributes,
            error=None if ok else ("SinkError", summary.get("error")),
        )

    def reported(self, task: Task, outcome: Outcome, path: ReportPath) -> None:
        pass

    def heartbeat(self, worker_id: str, pool: str, now: float) -> None:
        pass

    def _failure(self, what: str) -> None:
        if not self._failed_once:
            self._failed_once = True
            log.exception(what)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _failed(events: Sequence[Event]) -> bool:
    return any(
        e.type == EventType.WORKFLOW_FINISHED and e.payload.get("status") == "fail" for e in events
    )


def _compensating(events: Sequence[Event], index: int) -> bool:
    """Whether the step.started at `index` runs a compensating step (dispatched without
    its gate, right after its `step.called` with `compensating`)."""
    before = events[index - 1] if index > 0 else None
    return (
        before is not None
        and before.type == EventType.STEP_CALLED
        and bool(before.payload.get("compensating"))
    )
