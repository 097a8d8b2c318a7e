"""The Observer port: the few points where runtimes tell observability what happened.

Metrics (`noetl.observability.metrics`), logs (`noetl.observability.log_events`) and traces
(`noetl.observability.tracing_observer`) are observers. Every runtime holds one observer
(`NOOP` by default, which costs a method call that does nothing):

* `committed`: events a decision just committed (after the store accepted them), from the
  server's orchestrator, `Decider.start`, a worker's continuation, and the embedded runtime.
  Server-side metrics and log events are derived from these, so each event is observed
  exactly once, in the process that committed it.
* `claimed`, `tool_started`, `tool_finished`, `sink_started`, `sink_finished`, `reported`,
  `heartbeat`: a worker's side of a task (the embedded runtime's worker threads call the
  tool and sink hooks too, through `ToolRegistry`).

Observers must be cheap (they run on the hot path: a dict lookup and a counter per event)
and must never raise into the runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from noetl.core import Event, Outcome, Task
from noetl.core.views import ExecutionView
from noetl.dsl.graph import Graph

__all__ = ["NOOP", "NoopObserver", "Observer", "Observers", "ReportPath"]

# How a worker's outcome left it: decided on the worker (`continued`), sent to the inbox
# (`inbox`), refused because the lease was lost meanwhile (`refused`), or dropped (`lost`).
ReportPath = Literal["continued", "inbox", "refused", "lost"]


class Observer(Protocol):
    def committed(self, graph: Graph, state: ExecutionView, events: Sequence[Event]) -> None:
        """`events` of one execution were committed; `state` already folds them."""

    def claimed(self, task: Task, queued_s: float | None) -> None:
        """A worker leased `task`, `queued_s` after it became due (None: unknown)."""

    def tool_started(self, task: Task) -> None: ...

    def tool_finished(self, task: Task, outcome: Outcome, duration_s: float) -> None:
        """The tool (and its sinks) returned `outcome` after `duration_s` seconds."""

    def sink_started(self, task: Task, sink: Mapping[str, Any]) -> None: ...

    def sink_finished(
        self, task: Task, sink: Mapping[str, Any], summary: Mapping[str, Any]
    ) -> None:
        """One sink of `task` was written (or failed); `summary` as `Outcome.sinks` has it."""

    def reported(self, task: Task, outcome: Outcome, path: ReportPath) -> None:
        """A worker is done with `task`: its outcome went `path`."""

    def heartbeat(self, worker_id: str, pool: str, now: float) -> None:
        """A worker recorded that it is alive."""


class NoopObserver:
    """Observes nothing (metrics and logs disabled)."""

    def committed(self, graph: Graph, state: ExecutionView, events: Sequence[Event]) -> None:
        pass

    def claimed(self, task: Task, queued_s: float | None) -> None:
        pass

    def tool_started(self, task: Task) -> None:
        pass

    def tool_finished(self, task: Task, outcome: Outcome, duration_s: float) -> None:
        pass

    def sink_started(self, task: Task, sink: Mapping[str, Any]) -> None:
        pass

    def sink_finished(
        self, task: Task, sink: Mapping[str, Any], summary: Mapping[str, Any]
    ) -> None:
        pass

    def reported(self, task: Task, outcome: Outcome, path: ReportPath) -> None:
        pass

    def heartbeat(self, worker_id: str, pool: str, now: float) -> None:
        pass


NOOP: Observer = NoopObserver()


class Observers:
    """Several observers behind one (metrics, logs, spans)."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)

    @classmethod
    def of(cls, *observers: Observer | None) -> Observer:
        """The observers given (None and NOOP left out); NOOP when there are none, the
        observer itself when there is one."""
        chosen = [o for o in observers if o is not None and o is not NOOP]
        if not chosen:
            return NOOP
        return chosen[0] if len(chosen) == 1 else cls(chosen)

    def committed(self, graph: Graph, state: ExecutionView, events: Sequence[Event]) -> None:
        for observer in self.observers:
            observer.committed(graph, state, events)

    def claimed(self, task: Task, queued_s: float | None) -> None:
        for observer in self.observers:
            observer.claimed(task, queued_s)

    def tool_started(self, task: Task) -> None:
        for observer in self.observers:
            observer.tool_started(task)

    def tool_finished(self, task: Task, outcome: Outcome, duration_s: float) -> None:
        for observer in self.observers:
            observer.tool_finished(task, outcome, duration_s)

    def sink_started(self, task: Task, sink: Mapping[str, Any]) -> None:
        for observer in self.observers:
            observer.sink_started(task, sink)

    def sink_finished(
        self, task: Task, sink: Mapping[str, Any], summary: Mapping[str, Any]
    ) -> None:
        for observer in self.observers:
            observer.sink_finished(task, sink, summary)

    def reported(self, task: Task, outcome: Outcome, path: ReportPath) -> None:
        for observer in self.observers:
            observer.reported(task, outcome, path)

    def heartbeat(self, worker_id: str, pool: str, now: float) -> None:
        for observer in self.observers:
            observer.heartbeat(worker_id, pool, now)
