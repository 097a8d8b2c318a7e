"""The observer that writes seed 000's log events (8.2) from committed events and worker
hooks, so "did this run execute, and how far did it get?" can be answered from logs.

Levels keep a big loop quiet at INFO: execution- and step-level events (execution_started,
step_called, step_parked, step_dispatch, result_integrate, step_done, route_edge_selected,
execution_finished) are INFO; per-task and per-item events (task_enqueue, sink_dispatch,
task_claimed, plugin_start, plugin_done, sink_start, sink_done, task_ack) are DEBUG, or INFO
and WARNING when something went wrong (a failed plugin, a retry, a dead letter).
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
from noetl.observability.logging import log_event
from noetl.observability.observer import ReportPath
from noetl.redaction import signature_of

__all__ = ["LogObserver"]

DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING
_Handler = Callable[["_Batch", int], None]


class _Batch:
    """One call of `committed`: what every handler needs."""

    __slots__ = ("events", "facts", "fields", "graph", "state")

    def __init__(
        self, graph: Graph, facts: PlaybookFacts, state: ExecutionView, events: Sequence[Event]
    ):
        self.graph = graph
        self.facts = facts
        self.state = state
        self.events = events
        self.fields = {"execution_id": state.execution_id, "workflow_ref": facts.ref}


class LogObserver:
    """Logs to `noetl.orchestrator` (decisions) and `noetl.worker` (tasks) by default."""

    def __init__(
        self,
        *,
        worker_id: str | None = None,
        decisions: logging.Logger | None = None,
        tasks: logging.Logger | None = None,
        complexity_warn: int | None = None,
    ) -> None:
        self.worker_id = worker_id
        # An execution whose plan scores this or more is reported too complex when it
        # starts and when a task of it is dead-lettered (noetl.dsl.complexity).
        self.complexity_warn = complexity_warn
        self.log = decisions or logging.getLogger("noetl.orchestrator")
        self.task_log = tasks or logging.getLogger("noetl.worker")
        self._failed_once = False
        # Handlers for events that may log at INFO or above; per-item events only at DEBUG.
        self._info: dict[str, _Handler] = {
            EventType.WORKFLOW_STARTED: self._workflow_started,
            EventType.WORKFLOW_FINISHED: self._workflow_finished,
            EventType.CANCEL_REQUESTED: self._cancel_requested,
            EventType.STEP_CALLED: self._step_called,
            EventType.STEP_PARKED: self._step_parked,
            EventType.STEP_STARTED: self._step_started,
            EventType.LOOP_STARTED: self._loop_started,
            EventType.STEP_FINISHED: self._step_finished,
            EventType.STEP_SKIPPED: self._step_skipped,
            EventType.NEXT_EVALUATED: self._next_evaluated,
            EventType.TASK_DEAD_LETTERED: self._dead_lettered,
            EventType.RETRY_STARTED: self._retry_started,
            EventType.TASK_RECLAIMED: self._task_reclaimed,
            EventType.COMPENSATION_STARTED: self._compensation_started,
        }
        self._debug = {**self._info, EventType.LOOP_ITERATION_STARTED: self._iteration_started}
        # With INFO off: the handlers that may log at WARNING (most events only log INFO).
        self._warning: dict[str, _Handler] = {event: self._info[event] for event in _MAY_WARN}

    # --- decisions -----------------------------------------------------------------------

    def committed(self, graph: Graph, state: ExecutionView, events: Sequence[Event]) -> None:
        log = self.log
        if not log.isEnabledFor(WARNING):
            return
        try:
            if log.isEnabledFor(DEBUG):
                handlers = self._debug
            elif log.isEnabledFor(INFO):
                handlers = self._info
            else:
                handlers = self._warning
                if not any(event.type in handlers for event in events):
                    return
            batch = _Batch(graph, facts_of(graph), state, events)
            for index, event in enumerate(events):
                handler = handlers.get(event.type)
                if handler is not None:
                    handler(batch, index)
        except Exception:  # logging must never break a runtime
            if not self._failed_once:
                self._failed_once = True
                logging.getLogger("noetl.observability").exception("log events failed")

    def _emit(self, level: int, name: str, batch: _Batch, event: Event, **fields: Any) -> None:
        log_event(self.log, level, name, **batch.fields, step_id=event.step, **fields)

    def _workflow_started(self, batch: _Batch, i: int) -> None:
        self._emit(INFO, "execution_started", batch, batch.events[i], workflow=batch.facts.workflow)
        self._too_complex("plan.too_complex", batch, i)

    def _too_complex(self, name: str, batch: _Batch, i: int) -> None:
        """`plan.too_complex` (at start) or `dlq.too_complex` (a dead letter), WARNING,
        for an execution whose plan scores `complexity_warn` or more."""
        if self.complexity_warn is None:
            return
        found = too_complex(batch.graph, batch.state.workload, self.complexity_warn)
        if found is not None:
            fields = {"complexity": found.to_dict(), "threshold": self.complexity_warn}
            self._emit(WARNING, name, batch, batch.events[i], **fields)

    def _workflow_finished(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        status = event.payload.get("status")
        started = batch.state.started_at
        duration = None if started is None else round((event.ts - started) * 1000, 3)
        level = INFO if status == "ok" else WARNING
        self._emit(
            level,
            "execution_finished",
            batch,
            event,
            status=status,
            ok=status == "ok",
            duration_ms=duration,
            error=event.payload.get("error"),
            steps=_step_counts(batch.state),
        )

    def _cancel_requested(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        self._emit(INFO, "cancel_requested", batch, event, by=event.payload.get("by"))

    def _step_called(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        by = str(event.payload.get("by"))
        reason = by if by in ("execution", "rollback") else f"predecessor:{by}"
        self._emit(
            INFO,
            "step_called",
            batch,
            event,
            reason=reason,
            ignored=event.payload.get("ignored"),
            edge_index=_edge_index(batch.events, i, by, event.step),
        )

    def _step_parked(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        error = event.payload.get("when_error")
        self._emit(
            INFO,
            "step_parked",
            batch,
            event,
            when_expr=batch.facts.when.get(event.step or ""),
            when_result="error" if error is not None else False,
            error=error,
        )

    def _step_started(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        if (event.step or "") in batch.facts.loops:
            return  # a loop is logged when its collection is known (loop.started)
        self._emit(INFO, "step_dispatch", batch, event)
        task = event.payload.get("task")
        if task is not None and self.log.isEnabledFor(DEBUG):
            self._enqueued(batch, event, task)

    def _loop_started(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        plan = {"total": len(event.payload.get("items") or ()), "mode": event.payload.get("mode")}
        self._emit(INFO, "step_dispatch", batch, event, loop_plan=plan)

    def _iteration_started(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        task = event.payload.get("task")
        if task is not None:
            self._enqueued(batch, event, task)

    def _enqueued(self, batch: _Batch, event: Event, task: Mapping[str, Any]) -> None:
        self._emit(
            DEBUG,
            "task_enqueue",
            batch,
            event,
            message_id=task.get("task_id"),
            tool_kind=task.get("kind"),
            loop_index=task.get("index"),
            attempt=task.get("attempt"),
        )
        for sink in task.get("sinks") or ():
            self._emit(
                DEBUG,
                "sink_dispatch",
                batch,
                event,
                message_id=task.get("task_id"),
                sink_id=sink.get("id"),
                sink_type=sink.get("kind"),
            )

    def _step_finished(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        step = event.step or ""
        ok = event.payload.get("status") == "ok"
        kept = batch.facts.results.get(step)
        if ok and kept is not None:
            self._emit(INFO, "result_integrate", batch, event, **kept)
        run = batch.state.steps.get(step)
        counters = None
        duration = None
        if run is not None:
            if run.is_loop:
                counters = {
                    "total": run.total,
                    "completed": run.completed,
                    "succeeded": run.succeeded,
                    "failed": run.failed,
                }
            if run.started_at is not None:
                duration = round((event.ts - run.started_at) * 1000, 3)
        self._emit(
            INFO if ok else WARNING,
            "step_done",
            batch,
            event,
            ok=ok,
            done=True,
            counters=counters,
            duration_ms=duration,
            error=event.payload.get("error"),
        )

    def _step_skipped(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        self._emit(INFO, "step_skipped", batch, event, reason=event.payload.get("reason"))

    def _next_evaluated(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        source = event.step or ""
        conditions = batch.facts.edges.get(source, ())
        for index, edge in enumerate(event.payload.get("edges") or ()):
            if "error" in edge:
                self._emit(
                    WARNING,
                    "route_edge_error",
                    batch,
                    event,
                    from_step=source,
                    edge_index=index,
                    target_step=edge.get("to"),
                    error=edge.get("error"),
                )
            if not edge.get("fired"):
                continue
            self._emit(
                INFO,
                "route_edge_selected",
                batch,
                event,
                from_step=source,
                edge_index=index,
                target_step=edge.get("to"),
                condition=conditions[index] if index < len(conditions) else None,
            )
        if event.payload.get("unhandled_failure"):
            self._emit(
                WARNING,
                "step_failure_unhandled",
                batch,
                event,
                on_step_fail=event.payload.get("on_step_fail"),
            )

    def _dead_lettered(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        payload = event.payload
        self._emit(
            WARNING,
            "task_dlq",
            batch,
            event,
            message_id=payload.get("task_id"),
            tool_kind=payload.get("kind"),
            attempt=payload.get("attempts", 1),
            reason=payload.get("reason"),
            error_class=payload.get("error_type"),
            error=payload.get("error"),
            sink_id=payload.get("sink_id"),
        )
        self._too_complex("dlq.too_complex", batch, i)

    def _retry_started(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        payload = event.payload
        self._emit(
            INFO,
            "task_retry",
            batch,
            event,
            message_id=payload.get("task_id"),
            loop_index=payload.get("index"),
            attempt=payload.get("attempt"),
            max_attempts=payload.get("max_attempts"),
            next_delay_ms=payload.get("delay_ms"),
            backoff_ms=payload.get("delay_ms"),
            reason=payload.get("reason"),
            error_class=payload.get("error_type"),
            error=payload.get("error"),
        )

    def _task_reclaimed(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        payload = event.payload
        self._emit(
            WARNING,
            "task_reclaimed",
            batch,
            event,
            message_id=payload.get("task_id"),
            attempt=payload.get("attempt"),
            worker_id=payload.get("worker_id"),
        )

    def _compensation_started(self, batch: _Batch, i: int) -> None:
        event = batch.events[i]
        payload = event.payload
        self._emit(
            WARNING,
            "compensation_started",
            batch,
            event,
            failed_step=payload.get("failed_step"),
            queue=payload.get("queue"),
        )

    # --- workers -------------------------------------------------------------------------

    def claimed(self, task: Task, queued_s: float | None) -> None:
        if not self.task_log.isEnabledFor(DEBUG):  # per task: not even its fields made
            return
        log_event(
            self.task_log,
            DEBUG,
            "task_claimed",
            message_id=task.task_id,
            step_id=task.step,
            tool_kind=task.kind,
            attempt=task.attempt,
            worker_id=self.worker_id,
            queued_ms=None if queued_s is None else round(queued_s * 1000, 3),
        )

    def tool_started(self, task: Task) -> None:
        if self.task_log.isEnabledFor(DEBUG):
            log_event(
                self.task_log,
                DEBUG,
                "plugin_start",
                tool_kind=task.kind,
                spec_signature=signature_of(task.spec),
            )

    def tool_finished(self, task: Task, outcome: Outcome, duration_s: float) -> None:
        level = DEBUG if outcome.ok else INFO
        if not self.task_log.isEnabledFor(level):
            return
        log_event(
            self.task_log,
            level,
            "plugin_done",
            tool_kind=task.kind,
            duration_ms=round(duration_s * 1000, 3),
            ok=outcome.ok,
            error_class=None if outcome.ok else outcome.error_type,
            error=None if outcome.ok else outcome.error,
        )

    def sink_started(self, task: Task, sink: Mapping[str, Any]) -> None:
        log_event(
            self.task_log, DEBUG, "sink_start", sink_id=sink.get("id"), sink_type=sink.get("kind")
        )

    def sink_finished(
        self, task: Task, sink: Mapping[str, Any], summary: Mapping[str, Any]
    ) -> None:
        ok = summary.get("status") == "ok"
        log_event(
            self.task_log,
            DEBUG if ok else WARNING,
            "sink_done",
            sink_id=summary.get("id"),
            sink_type=summary.get("kind"),
            duration_ms=summary.get("duration_ms"),
            attempts=summary.get("attempts"),
            rows=summary.get("rows"),
            ok=ok,
            error=summary.get("error"),
        )

    def reported(self, task: Task, outcome: Outcome, path: ReportPath) -> None:
        level = DEBUG if path in ("continued", "inbox") else INFO
        if not self.task_log.isEnabledFor(level):
            return
        log_event(
            self.task_log,
            level,
            "task_ack",
            message_id=task.task_id,
            ok=outcome.ok,
            duration_ms=round(outcome.duration_ms, 3),
            path=path,
            worker_id=self.worker_id,
        )

    def heartbeat(self, worker_id: str, pool: str, now: float) -> None:
        pass


# The events whose handlers may log at WARNING: a start too complex, a failed execution
# or step, a dead end or a jump past the steps, a dead letter, a reclaimed task, a
# compensation.
_MAY_WARN = (
    EventType.WORKFLOW_STARTED,
    EventType.WORKFLOW_FINISHED,
    EventType.STEP_FINISHED,
    EventType.NEXT_EVALUATED,
    EventType.TASK_DEAD_LETTERED,
    EventType.TASK_RECLAIMED,
    EventType.COMPENSATION_STARTED,
)


def _edge_index(events: Sequence[Event], index: int, source: str, target: str | None) -> int | None:
    """The position of the edge `source -> target` among the source's edges, from the
    `next.evaluated` shortly before the call (the same decision), if found."""
    for event in reversed(events[max(index - 64, 0) : index]):
        if event.type == EventType.NEXT_EVALUATED and event.step == source:
            for position, edge in enumerate(event.payload.get("edges") or ()):
                if edge.get("to") == target and edge.get("fired"):
                    return position
            return None
    return None


def _step_counts(state: ExecutionView) -> dict[str, int]:
    counts: dict[str, int] = {}
    for run in state.steps.values():
        counts[run.status.value] = counts.get(run.status.value, 0) + 1
    return counts
