"""Observability: metrics, structured logs, traces and redaction, behind the `Observer` port.

Runtimes call an `Observer` at a few points (see `observer`); `MetricsObserver`,
`LogObserver` and `TracingObserver` turn those calls into Prometheus metrics, seed 000's log
events and OpenTelemetry spans. `observer_for` builds the observer of a process.
prometheus_client and OpenTelemetry are imported only where metrics or traces are on, so
commands that do not use them start as fast as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from noetl.observability.observer import NOOP, NoopObserver, Observer, Observers, ReportPath

if TYPE_CHECKING:
    from noetl.core import Event
    from noetl.observability.metrics import Metrics
    from noetl.observability.tracing import Tracing

__all__ = ["NOOP", "NoopObserver", "Observer", "Observers", "ReportPath", "observer_for"]


def observer_for(
    *,
    metrics: Metrics | None = None,
    logs: bool = True,
    pool: str = "default",
    worker_id: str | None = None,
    tracing: Tracing | None = None,
    load_events: Callable[[str], Sequence[Event]] | None = None,
    complexity_warn: int | None = None,
) -> Observer:
    """The observer of a process: metrics when `metrics` is given, log events when
    `logs`, spans when `tracing` is given (`load_events` reads an execution's log, for
    the spans of a failed execution that was not sampled); NOOP when none. An execution
    whose plan scores `complexity_warn` or more is reported too complex by the metrics
    and the log events (noetl.dsl.complexity)."""
    recorder: Observer | None = None
    writer: Observer | None = None
    tracer: Observer | None = None
    if metrics is not None:
        from noetl.observability.metrics_observer import MetricsObserver  # noqa: PLC0415

        recorder = MetricsObserver(metrics, pool=pool, complexity_warn=complexity_warn)
    if logs:
        from noetl.observability.log_events import LogObserver  # noqa: PLC0415

        writer = LogObserver(worker_id=worker_id, complexity_warn=complexity_warn)
    if tracing is not None:
        from noetl.observability.tracing_observer import TracingObserver  # noqa: PLC0415

        tracer = TracingObserver(tracing, load_events=load_events)
    return Observers.of(recorder, writer, tracer)
