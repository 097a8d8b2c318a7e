"""Tracing built from the `tracing` settings (no span leaves the process here)."""

from __future__ import annotations

import sys

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from noetl.config import Settings
from noetl.config.model import TracingSettings
from noetl.errors import ConfigError
from noetl.observability.trace_context import TraceSampler
from noetl.observability.tracing import _traces_url, exporter_of, start_tracing


def settings(**values: object) -> TracingSettings:
    return Settings.model_validate({"tracing": {"enabled": True, **values}}).tracing


def test_tracing_off_or_exporting_nothing_builds_nothing() -> None:
    assert start_tracing(Settings().tracing, service="s") is None
    assert start_tracing(settings(exporter="none"), service="s") is None
    assert exporter_of(settings(exporter="none")) is None


def test_the_configured_exporter_behind_a_batch_processor() -> None:
    tracing = start_tracing(settings(exporter="console", sample_rate=0.5), service="noetl-x")
    assert tracing is not None
    try:
        assert isinstance(tracing.processor, BatchSpanProcessor)
        assert tracing.sampler == TraceSampler(0.5, True)
        assert tracing.resource.attributes["service.name"] == "noetl-x"
    finally:
        tracing.shutdown()
    console = exporter_of(settings(exporter="console"))
    assert isinstance(console, ConsoleSpanExporter)
    assert console.out is sys.stderr  # stdout is for results (`noetl run --json`)
    assert isinstance(exporter_of(settings()), Http)
    assert isinstance(exporter_of(settings(endpoint="http://collector:4318")), Http)
    assert isinstance(exporter_of(settings(endpoint="grpc://collector:4317")), Grpc)
    given = InMemorySpanExporter()
    replaced = start_tracing(settings(), service="s", exporter=given)
    assert replaced is not None
    replaced.shutdown()


def test_a_collectors_base_url_gets_the_traces_path() -> None:
    assert _traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert _traces_url("https://c.example/") == "https://c.example/v1/traces"
    assert _traces_url("https://c.example/otlp/v1/traces") == "https://c.example/otlp/v1/traces"


def test_grpc_without_its_exporter_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)
    with pytest.raises(ConfigError, match=r"tracing\.endpoint: a grpc:// endpoint needs"):
        exporter_of(settings(endpoint="grpc://collector:4317"))
