"""Serving metrics: a small HTTP exporter for workers and `noetl run`, and the text of a
scrape for the server's `/metrics` route."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest, start_http_server
from prometheus_client.registry import CollectorRegistry

from noetl.errors import ConfigError

__all__ = ["CONTENT_TYPE", "Exporter", "render", "start_exporter"]

CONTENT_TYPE = CONTENT_TYPE_LATEST


def render(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format of everything in `registry`."""
    return generate_latest(registry)


@dataclass
class Exporter:
    """A running exporter; `port` is the one it listens on (useful when asked for 0)."""

    host: str
    port: int
    _server: WSGIServer
    _thread: threading.Thread

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_exporter(registry: CollectorRegistry, port: int, host: str = "127.0.0.1") -> Exporter:
    """Serve `registry` on http://host:port/metrics from a daemon thread. ConfigError
    (naming the address) when the port cannot be bound."""
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from None
    return Exporter(host, int(server.server_address[1]), server, thread)
