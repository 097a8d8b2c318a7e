"""A loopback server that speaks just enough of the PostgreSQL protocol to refuse a login:
it declines SSL and GSS encryption, asks for a cleartext password, and answers with a
FATAL `28P01` (invalid_password) error whose message QUOTES the password it was sent.

The local test PostgreSQL trusts every login, so it cannot refuse a wrong password; this
stands in for a server (or a pooler) that refuses one, and for the worst such server: one
that repeats the password. Whatever the client library or NoETL do with that message, the
password must not come out of a task.
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from types import TracebackType

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104


class _Handler(socketserver.BaseRequestHandler):
    server: RefusingPostgres

    def handle(self) -> None:
        conn: socket.socket = self.request
        conn.settimeout(5)
        try:
            while True:  # encryption requests first, then the startup message
                length, code = struct.unpack("!ii", _read(conn, 8))
                rest = _read(conn, length - 8)
                if code in (_SSL_REQUEST, _GSS_REQUEST):
                    conn.sendall(b"N")
                    continue
                user = _startup_user(rest)
                break
            conn.sendall(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
            kind = _read(conn, 1)
            (size,) = struct.unpack("!i", _read(conn, 4))
            password = _read(conn, size - 4).rstrip(b"\0").decode("utf-8", "replace")
            if kind != b"p":
                return
            self.server.passwords.append(password)
            message = f'password authentication failed for user "{user}" (sent "{password}")'
            fields = b"".join(
                tag + value.encode() + b"\0"
                for tag, value in ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", "28P01"))
            )
            fields += b"M" + message.encode() + b"\0" + b"\0"
            conn.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)
        except (OSError, struct.error):
            return


def _read(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _startup_user(body: bytes) -> str:
    parts = body.split(b"\0")  # key, value, ..., "" (after the protocol version)
    pairs = dict(zip(parts[::2], parts[1::2], strict=False))
    return pairs.get(b"user", b"?").decode("utf-8", "replace")


class RefusingPostgres(socketserver.ThreadingTCPServer):
    """Use as a context manager; `port` is where it listens, `passwords` what it got."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.passwords: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def __enter__(self) -> RefusingPostgres:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)
