"""Observability: metrics, structured logs and redaction, behind the `Observer` port.

Runtimes call an `Observer` at a few points (see `observer`); `MetricsObserver` and
`LogObserver` turn those calls into Prometheus metrics and seed 000's log events.
`observer_for` builds the observer of a process. prometheus_client is imported only where
metrics are on, so commands that do not serve them start as fast as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from noetl.observability.observer import NOOP, NoopObserver, Observer, Observers, ReportPath

if TYPE_CHECKING:
    from noetl.observability.metrics import Metrics

__all__ = ["NOOP", "NoopObserver", "Observer", "Observers", "ReportPath", "observer_for"]


def observer_for(
    *,
    metrics: Metrics | None = None,
    logs: bool = True,
    pool: str = "default",
    worker_id: str | None = None,
) -> Observer:
    """The observer of a process: metrics when `metrics` is given, log events when
    `logs`; NOOP when neither."""
    recorder: Observer | None = None
    writer: Observer | None = None
    if metrics is not None:
        from noetl.observability.metrics_observer import MetricsObserver  # noqa: PLC0415

        recorder = MetricsObserver(metrics, pool=pool)
    if logs:
        from noetl.observability.log_events import LogObserver  # noqa: PLC0415

        writer = LogObserver(worker_id=worker_id)
    return Observers.of(recorder, writer)
