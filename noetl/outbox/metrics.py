"""Prometheus metrics of the outbox relay, in a registry of its own (as
`noetl.observability.metrics.Metrics`: nothing global, tests build several)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from noetl.observability.metrics import Family

__all__ = ["OUTBOX_METRIC_NAMES", "OutboxMetrics"]

OUTBOX_METRIC_NAMES = (
    "noetl_outbox_published_total",
    "noetl_outbox_publish_failures_total",
    "noetl_outbox_dead_lettered_total",
    "noetl_outbox_unsent",
    "noetl_outbox_lag_seconds",
)


class OutboxMetrics:
    """The relay's counters and gauges, labelled by outbox table."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.published = Family(
            Counter(
                "noetl_outbox_published_total",
                "Outbox rows published and acknowledged by JetStream.",
                ["table"],
                registry=r,
            )
        )
        self.failed = Family(
            Counter(
                "noetl_outbox_publish_failures_total",
                "Failed publish attempts of outbox rows.",
                ["table"],
                registry=r,
            )
        )
        self.dead_lettered = Family(
            Counter(
                "noetl_outbox_dead_lettered_total",
                "Outbox rows given up on (status dead) after their last attempt.",
                ["table"],
                registry=r,
            )
        )
        self.unsent = Family(
            Gauge(
                "noetl_outbox_unsent",
                "Outbox rows still pending at the relay's last pass.",
                ["table"],
                registry=r,
            )
        )
        self.lag = Family(
            Gauge(
                "noetl_outbox_lag_seconds",
                "Age of the oldest pending outbox row at the relay's last pass (0: none).",
                ["table"],
                registry=r,
            )
        )
