"""Logging and metrics options shared by `noetl server start`, `worker start` and `run`.

Every flag has its environment twin (NOETL_LOGGING_LEVEL, with NOETL_LOG_LEVEL still read
as an alias; NOETL_LOGGING_FORMAT; NOETL_METRICS_ENABLED, NOETL_METRICS_PORT,
NOETL_METRICS_HOST, NOETL_METRICS_PATH).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from noetl.observability.logging import LOG_FORMATS, configure_logging

if TYPE_CHECKING:
    from noetl.observability.exporter import Exporter
    from noetl.observability.metrics import Metrics
    from noetl.store.base import Store

F = TypeVar("F", bound=Callable[..., Any])
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_options(default_level: str) -> Callable[[F], F]:
    """`--log-level` and `--log-format`."""

    def decorate(func: F) -> F:
        func = click.option(
            "--log-format",
            type=click.Choice(LOG_FORMATS),
            default="text",
            envvar="NOETL_LOGGING_FORMAT",
            show_envvar=True,
            show_default=True,
            help="json: one JSON object per line (for log shippers); text: for terminals.",
        )(func)
        return click.option(
            "--log-level",
            type=click.Choice(LEVELS, case_sensitive=False),
            default=default_level,
            envvar=["NOETL_LOGGING_LEVEL", "NOETL_LOG_LEVEL"],
            show_envvar=True,
            show_default=True,
            help="Level of NoETL's own logs (other libraries log from WARNING).",
        )(func)

    return decorate


def metrics_options(*, port: bool, path: bool = False) -> Callable[[F], F]:
    """`--metrics/--no-metrics`, and `--metrics-port`/`--metrics-host` (an exporter of
    its own) or `--metrics-path` (a route of the server's API)."""

    def decorate(func: F) -> F:
        if path:
            func = click.option(
                "--metrics-path",
                default="/metrics",
                envvar="NOETL_METRICS_PATH",
                show_envvar=True,
                show_default=True,
                help="Path of the metrics on the API's port.",
            )(func)
        if port:
            func = click.option(
                "--metrics-host",
                default="127.0.0.1",
                envvar="NOETL_METRICS_HOST",
                show_envvar=True,
                show_default=True,
                help="Address the metrics exporter listens on.",
            )(func)
            func = click.option(
                "--metrics-port",
                type=click.IntRange(0, 65535),
                default=None,
                envvar="NOETL_METRICS_PORT",
                show_envvar=True,
                help="Serve Prometheus metrics on this port at /metrics (0: any free port).",
            )(func)
        return click.option(
            "--metrics/--no-metrics",
            "metrics_enabled",
            default=True,
            envvar="NOETL_METRICS_ENABLED",
            show_envvar=True,
            show_default=True,
            help="Record Prometheus metrics.",
        )(func)

    return decorate


def setup_logging(level: str, fmt: str) -> None:
    configure_logging(level, fmt)


def new_metrics(store: Store | None = None) -> Metrics:
    """A registry of NoETL's metrics; with `store`, its state gauges too."""
    from noetl.observability.metrics import Metrics
    from noetl.observability.store_gauges import StoreGauges

    metrics = Metrics()
    if store is not None:
        metrics.registry.register(StoreGauges(store))
    return metrics


def serve_metrics(metrics: Metrics, port: int, host: str) -> Exporter:
    """Start the exporter and say where it listens (on stderr)."""
    from noetl.observability.exporter import start_exporter

    exporter = start_exporter(metrics.registry, port, host)
    click.echo(f"metrics on {exporter.url}", err=True)
    return exporter
