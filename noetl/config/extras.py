"""Settings that need a pip extra (`noetl.extras`): checked when a server, a worker or a run
starts, so a missing one stops it with the command that installs it rather than an
ImportError later."""

from __future__ import annotations

from typing import TYPE_CHECKING

from noetl.errors import MissingExtraError
from noetl.extras import EXTRAS, installed, needs_extra

if TYPE_CHECKING:
    from noetl.config.messaging import SessionsSettings
    from noetl.config.model import TracingSettings

__all__ = ["check_sessions", "check_tracing"]

_SDK = ("opentelemetry.sdk",)


def check_tracing(settings: TracingSettings) -> None:
    """MissingExtraError when tracing exports spans and OpenTelemetry is not installed
    (`exporter: none`, or tracing off, needs nothing). The console exporter and a grpc://
    endpoint need the SDK (the gRPC exporter is the `grpc` extra's, checked where it is
    built); OTLP over HTTP needs the whole `otel` extra."""
    if not settings.enabled or settings.exporter == "none":
        return
    grpc = (settings.endpoint or "").lower().startswith("grpc://")
    modules = _SDK if settings.exporter == "console" or grpc else EXTRAS["otel"]
    if not installed("otel", modules):
        what = f"tracing.exporter is '{settings.exporter}' (tracing.enabled)"
        raise MissingExtraError(needs_extra(what, "otel"))


def check_sessions(settings: SessionsSettings) -> None:
    """MissingExtraError when `sessions.backend: nats` and nats-py is not installed."""
    if settings.backend == "nats" and not installed("nats"):
        raise MissingExtraError(needs_extra("sessions.backend is 'nats'", "nats"))
