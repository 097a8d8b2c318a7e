"""Tracing with OpenTelemetry (seed 000, 8.3): where spans go, and how one is written.

Spans are written whole, once what they describe is over: a decision's spans when it
commits, from its events' timestamps; a tool's or a sink's span when it returns. So no
span stays open across processes or hours, and every id is derived from what it describes
(`noetl.observability.trace_context`), which is what lets a server, another server after a
restart and a worker's continuation add to one trace per execution. Spans are handed to
the span processor (the SDK's batch processor, then an exporter) as `ReadableSpan`s with
explicit ids, parents, start and end times: the SDK's own tracer can only start spans now,
with ids it draws itself.

`start_tracing(settings, service=...)` builds a process's tracing from the `tracing`
settings at start-up (`server start`, `worker start`, `run`); `Tracing.shutdown()` flushes
what is queued. Tracing off: nothing here is imported, and no observer is installed.

Every attribute and message goes through `clean`: secret values this process resolved
(`SECRET_VALUES`) and passwords in URLs are masked, and long text is cut. Spans carry shape
signatures (`signature_of`), never payloads.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SpanEvent
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from noetl import __version__
from noetl.errors import ConfigError
from noetl.observability.trace_context import TraceSampler, sampler_of
from noetl.redaction import SECRET_VALUES, mask_url

if TYPE_CHECKING:
    from noetl.config.model import TracingSettings

__all__ = ["MAX_TEXT", "Tracing", "clean", "exporter_of", "start_tracing"]

log = logging.getLogger("noetl.observability")
MAX_TEXT = 1024  # characters of one attribute or message, at most
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_SCOPE = InstrumentationScope("noetl", __version__)
_UNSET = Status(StatusCode.UNSET)
# The password of a URL inside longer text (`mask_url` handles a text that is one URL).
_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s/@:]+):[^\s/@]+@")
Attributes = dict[str, str | bool | int | float]
_SCALARS = frozenset({bool, int, float})


def clean(value: object) -> str:
    """`value` as text fit for a span: secret values and passwords (of URLs, anywhere in
    the text, and `password=...` words) masked, cut short."""
    text = str(value)
    if "://" in text or "=" in text:  # what `mask_url` looks for (most text has neither)
        text = mask_url(text)
        if "@" in text:
            text = _USERINFO.sub(r"\1:***@", text)
    if SECRET_VALUES:
        text = SECRET_VALUES.mask(text)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def _attributes(values: Mapping[str, Any]) -> Attributes:
    """Span attributes: None left out, numbers and booleans kept, everything else cleaned."""
    out: Attributes = {}
    for key, value in values.items():
        if value is None:
            continue
        if type(value) in _SCALARS:
            out[key] = value
        else:
            out[key] = clean(value)
    return out


class Tracing:
    """A process's tracing: which executions are traced, and where their spans go."""

    def __init__(
        self,
        processor: SpanProcessor,
        *,
        sampler: TraceSampler | None = None,
        service: str = "noetl",
        resource: Resource | None = None,
    ) -> None:
        self.processor = processor
        self.sampler = sampler or TraceSampler()
        self.resource = resource or Resource.create(
            {"service.name": service, "service.version": __version__}
        )

    def span(
        self,
        name: str,
        *,
        trace_id: int,
        span_id: int,
        parent_id: int | None,
        start: float,
        end: float | None = None,
        attributes: Mapping[str, Any],
        error: tuple[str | None, str | None] | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> None:
        """Write one finished span (`start`/`end` in seconds since the epoch; `end` None:
        an instant). `error` (type, message) marks it failed, with an `exception` event."""
        start_ns = int(start * 1e9)
        end_ns = start_ns if end is None else max(int(end * 1e9), start_ns)
        status = _UNSET
        events: tuple[SpanEvent, ...] = ()
        if error is not None:
            kind_of_error, message = error
            text = clean(message or kind_of_error or "error")
            status = Status(StatusCode.ERROR, text)
            events = (
                SpanEvent(
                    "exception",
                    {"exception.type": clean(kind_of_error or "Error"), "exception.message": text},
                    timestamp=end_ns,
                ),
            )
        parent = None
        if parent_id is not None:
            parent = SpanContext(trace_id, parent_id, is_remote=True, trace_flags=_SAMPLED)
        self.processor.on_end(
            ReadableSpan(
                name=name,
                context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=_SAMPLED),
                parent=parent,
                resource=self.resource,
                attributes=_attributes(attributes),
                events=events,
                kind=kind,
                status=status,
                start_time=start_ns,
                end_time=end_ns,
                instrumentation_scope=_SCOPE,
            )
        )

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export what is queued; False if that did not finish in time."""
        return bool(self.processor.force_flush(int(timeout_s * 1000)))

    def shutdown(self, timeout_s: float = 3.0) -> bool:
        """Export what is queued and stop the processor (at the end of the process),
        waiting `timeout_s` at most: an exporter retrying an unreachable collector must
        not hold the process. False (and a warning) if it did not finish in time."""
        done = threading.Event()

        def stop() -> None:
            try:
                self.processor.shutdown()
            finally:
                done.set()

        threading.Thread(target=stop, name="noetl-tracing-shutdown", daemon=True).start()
        if done.wait(timeout_s):
            return True
        log.warning("tracing: spans not exported within %.0f s of shutdown; dropped", timeout_s)
        return False


def exporter_of(settings: TracingSettings) -> SpanExporter | None:
    """The span exporter the settings name: OTLP over HTTP (or gRPC for a `grpc://`
    endpoint), the console (stderr, one JSON document per span), or None for `none`."""
    if settings.exporter == "none":
        return None
    if settings.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter  # noqa: PLC0415

        return ConsoleSpanExporter(out=sys.stderr)
    endpoint = settings.endpoint
    if endpoint is not None and endpoint.lower().startswith("grpc://"):
        return _grpc_exporter(endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )

    return OTLPSpanExporter(endpoint=None if endpoint is None else _traces_url(endpoint))


def _traces_url(endpoint: str) -> str:
    """A collector's base URL (`http://collector:4318`) gets the traces path OTLP/HTTP
    uses (`/v1/traces`); a URL with a path is used as it is."""
    parts = urlsplit(endpoint)
    if parts.path not in ("", "/"):
        return endpoint
    return urlunsplit((parts.scheme, parts.netloc, "/v1/traces", parts.query, parts.fragment))


def _grpc_exporter(endpoint: str) -> SpanExporter:
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter,
        )
    except ImportError:
        raise ConfigError(
            "tracing.endpoint: a grpc:// endpoint needs the OTLP gRPC exporter "
            "(pip install 'noetl[grpc]'), or use the collector's OTLP/HTTP port (4318)"
        ) from None
    target = endpoint.split("://", 1)[1].rstrip("/")
    exporter: SpanExporter = OTLPSpanExporter(endpoint=target, insecure=True)
    return exporter


def start_tracing(
    settings: TracingSettings,
    *,
    service: str,
    exporter: SpanExporter | None = None,
    processor: SpanProcessor | None = None,
) -> Tracing | None:
    """The tracing of a process from its `tracing` settings; None when tracing is off or
    exports nothing (`exporter: none`; the sampler alone is then used, see
    `sampler_of`). `exporter` / `processor` replace the configured ones (tests)."""
    if not settings.enabled:
        return None
    if processor is None:
        exporter = exporter if exporter is not None else exporter_of(settings)
        if exporter is None:
            return None
        processor = BatchSpanProcessor(exporter)
    return Tracing(processor, sampler=sampler_of(settings), service=service)
