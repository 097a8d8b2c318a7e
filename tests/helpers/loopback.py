"""A real HTTP server on a free loopback port, in a thread, for the duration of a test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    # The socket's backlog: the default 5 drops the connections of a burst (a parallel
    # loop's calls), and each dropped one comes a second later.
    request_queue_size = 128


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """Serve `handler` on 127.0.0.1 (a free port) until the block ends."""
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def base_url(server: ThreadingHTTPServer) -> str:
    """`http://127.0.0.1:<port>` of a server `serving` started."""
    return f"http://127.0.0.1:{server.server_address[1]}"
