"""Logging, metrics and tracing shared by `noetl server start`, `worker start` and `run`.

Each flag sets a key of the configuration (`logging.level`, `logging.format`,
`metrics.enabled`, `metrics.port`, `metrics.host`, `metrics.path`), so its environment twin
is the configuration's (NOETL_LOGGING_LEVEL, with NOETL_LOG_LEVEL as an alias;
NOETL_LOGGING_FORMAT; NOETL_METRICS_ENABLED, ...), and so is the file. Tracing has no flags
of its own: the `tracing` section (NOETL_TRACING_*) configures it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from noetl.cli.settings import setting_option
from noetl.observability.logging import LOG_FORMATS, configure_logging

if TYPE_CHECKING:
    from noetl.config import Settings
    from noetl.observability.exporter import Exporter
    from noetl.observability.metrics import Metrics
    from noetl.observability.tracing import Tracing
    from noetl.store.base import Store

F = TypeVar("F", bound=Callable[..., Any])
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_options(default_level: str) -> Callable[[F], F]:
    """`--log-level` and `--log-format` (`default_level` when the settings leave it unset)."""

    def decorate(func: F) -> F:
        func = setting_option(
            "logging.format",
            "--log-format",
            type=click.Choice(LOG_FORMATS),
            help="json: one JSON object per line (for log shippers); text: for terminals.",
        )(func)
        return setting_option(
            "logging.level",
            "--log-level",
            type=click.Choice(LEVELS, case_sensitive=False),
            help="Level of NoETL's own logs (other libraries log from WARNING).",
            default_text=default_level,
        )(func)

    return decorate


def metrics_options(*, port: bool, path: bool = False) -> Callable[[F], F]:
    """`--metrics/--no-metrics`, and `--metrics-port`/`--metrics-host` (an exporter of
    its own) or `--metrics-path` (a route of the server's API)."""

    def decorate(func: F) -> F:
        if path:
            func = setting_option(
                "metrics.path", "--metrics-path", help="Path of the metrics on the API's port."
            )(func)
        if port:
            func = setting_option(
                "metrics.host", "--metrics-host", help="Address the metrics exporter listens on."
            )(func)
            func = setting_option(
                "metrics.port",
                "--metrics-port",
                type=click.IntRange(0, 65535),
                help="Serve Prometheus metrics on this port at /metrics (0: any free port).",
            )(func)
        return setting_option(
            "metrics.enabled", "--metrics/--no-metrics", help="Record Prometheus metrics."
        )(func)

    return decorate


def setup_logging(settings: Settings, default_level: str, *, stream: IO[str] | None = None) -> None:
    """Configure logging from the settings (`default_level` when they leave it unset),
    to `stream` (stderr by default)."""
    configure_logging(
        settings.logging.level or default_level,
        settings.logging.format,
        redact_keys=settings.logging.redact_keys,
        stream=stream,
    )


def new_metrics(store: Store | None = None) -> Metrics:
    """A registry of NoETL's metrics; with `store`, its state gauges too."""
    from noetl.observability.metrics import Metrics
    from noetl.observability.store_gauges import StoreGauges

    metrics = Metrics()
    if store is not None:
        metrics.registry.register(StoreGauges(store))
    return metrics


def exporter_metrics(settings: Settings) -> Metrics | None:
    """The metrics of a process that serves them on an exporter of its own (a worker,
    `noetl run`): only when enabled and a port is set."""
    if settings.metrics.enabled and settings.metrics.port is not None:
        return new_metrics()
    return None


def serve_metrics(metrics: Metrics, port: int, host: str) -> Exporter:
    """Start the exporter and say where it listens (on stderr)."""
    from noetl.observability.exporter import start_exporter

    exporter = start_exporter(metrics.registry, port, host)
    click.echo(f"metrics on {exporter.url}", err=True)
    return exporter


def setup_tracing(settings: Settings, service: str) -> Tracing | None:
    """The tracing of a process (`service` names it in the spans); None when tracing is
    off or exports nothing. The caller shuts it down at the end, which flushes it."""
    if not settings.tracing.enabled or settings.tracing.exporter == "none":
        return None  # OpenTelemetry is not even imported
    from noetl.config.extras import check_tracing
    from noetl.observability.tracing import start_tracing

    check_tracing(settings.tracing)  # before an ImportError could say it less clearly
    return start_tracing(settings.tracing, service=service)
