"""An HTTP server on loopback that is down, then slow to be ready, then answers: what the
retry, dead-letter and replay tests call (the `flaky` fixture of tests/conftest.py)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Flaky(ThreadingHTTPServer):
    """503 for the first `failures` calls, then 200 with the call number."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.failures = 0
        self.pending = 0  # then 200 {"state": "pending"} for this many calls
        self.calls: list[float] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/orders"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Flaky

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.calls.append(time.monotonic())
            number = len(self.server.calls)
            failing = number <= self.server.failures
            pending = not failing and number <= self.server.failures + self.server.pending
        status = 503 if failing else 200
        answer = {"call": number, "state": "pending" if pending else "done"}
        body = json.dumps(answer if not failing else {"error": "unavailable"})
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
