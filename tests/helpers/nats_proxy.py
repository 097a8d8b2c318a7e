"""A TCP proxy in front of NATS that acts when a client acknowledges a JetStream message:
a test kills the client's process at that moment, between the work the client did for
the message and the ack NATS would have received (the ack is not forwarded)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

ACK = b"$JS.ACK."


class AckTrap:
    """Listens on a port of its own and forwards to `target` (host, port); the first
    client-to-NATS chunk holding an ack calls `on_ack()` and is dropped, with the
    connection. Later connections are forwarded as they are."""

    def __init__(self, target: tuple[str, int], on_ack: Callable[[], None]) -> None:
        self.target = target
        self.on_ack = on_ack
        self.sprung = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, name="ack-trap", daemon=True).start()

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, to_nats: bool) -> None:
        pending = b""  # the tail of the last chunk: a subject may straddle two chunks
        try:
            while chunk := src.recv(65536):
                if to_nats and not self.sprung.is_set() and ACK in pending + chunk:
                    self.sprung.set()
                    self.on_ack()
                    return
                dst.sendall(chunk)
                pending = chunk[-len(ACK) :]
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
