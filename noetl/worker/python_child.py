"""The parent's side of one child process of the python pool (`noetl.worker.python_pool`):
starting it from the fork server, one call over its pipes (with the lines it prints on
the way), and stopping it."""

from __future__ import annotations

import math
import os
import pickle
import select
import signal
import struct
import time
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any

from noetl.worker._pychild import OUTPUT, READY, STDOUT_LIMIT, Reply, serve
from noetl.worker.fork import fork_context, main_hidden
from noetl.worker.output import TaskOutput

__all__ = [
    "START_TIMEOUT_S",
    "CallFailure",
    "ChildProcess",
    "Printed",
    "exit_message",
    "fork_context",
    "main_hidden",
]

START_TIMEOUT_S = 60.0  # a fresh interpreter importing this package; not the task's budget
# What one read of a child's pipe asks for: 64 KiB, or the rest of a big reply up to 4 MiB.
READ_BYTES = 1 << 16
READ_MAX_BYTES = 1 << 22


class CallFailure(Exception):
    """The call did not produce a reply; the child must be replaced."""

    def __init__(self, message: str, error_type: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type
        self.retryable = retryable


def exit_message(code: int | None) -> str:
    if code is None:
        return "python process exited (exit code unknown)"
    if code < 0:
        try:
            return f"python process exited with code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"python process exited with code {code}"


class ChildProcess:
    """One running child process and the parent's end of its pipe."""

    __slots__ = (
        "canceled",
        "exitcode",
        "frames",
        "poller",
        "process",
        "reader",
        "ready",
        "stopped",
        "writer",
    )

    def __init__(self, ctx: ForkServerContext) -> None:
        # Two one-way pipes: measurably quicker than one duplex socket pair.
        child_reader, writer = ctx.Pipe(duplex=False)
        reader, child_writer = ctx.Pipe(duplex=False)
        self.process: BaseProcess = ctx.Process(
            target=serve, args=(child_reader, child_writer), name="noetl-python", daemon=False
        )
        try:
            with main_hidden():
                self.process.start()
        finally:
            # Our copies of the child's ends must go, or a dead child never reads as EOF.
            child_reader.close()
            child_writer.close()
        self.reader: Connection = reader
        self.writer: Connection = writer
        self.frames = Frames(reader.fileno())
        self.poller = select.poll()
        self.poller.register(reader.fileno(), select.POLLIN)
        self.ready = False
        self.stopped = False
        self.canceled = False  # killed by `PythonPool.cancel`
        self.exitcode: int | None = None

    @classmethod
    def try_start(cls, ctx: ForkServerContext) -> ChildProcess | None:
        """A started child, or None (out of processes): the next call tries again."""
        try:
            return cls(ctx)
        except OSError:
            return None

    def wait_ready(self) -> None:
        """Block until the child's loop runs, so start-up never eats a task's budget."""
        got, greeting = self._receive(time.monotonic() + START_TIMEOUT_S)
        if not got:
            message = f"python process did not start within {START_TIMEOUT_S:g} s"
            raise CallFailure(message, "ProcessError", retryable=True)
        if greeting != READY:
            raise CallFailure("python process sent an unexpected greeting", "ProcessError")
        self.ready = True

    def call(self, request: Reply, timeout_s: float, output: Printed) -> Reply | None:
        """Send one request and wait for the reply; None when the time is up. The lines
        the call prints meanwhile go to `output`."""
        self.writer.send(request)
        return self.reply(time.monotonic() + timeout_s, output)

    def reply(self, deadline: float, output: Printed) -> Reply | None:
        """The next reply of what was sent (a call, or the next call of a batch), by
        `deadline` (`time.monotonic`), else None; the lines printed meanwhile go to
        `output`."""
        while True:
            got, message = self._receive(deadline)
            if not got:
                return None
            if message[0] == OUTPUT:
                output.add(message[1])
                continue
            reply: Reply = message
            return reply

    def _receive(self, deadline: float) -> tuple[bool, Any]:
        """(True, the child's next message) by `deadline`, else (False, None); EOFError
        when the child is gone."""
        while True:
            got, message = self.frames.next()
            if got:
                return True, message
            if not self._wait(deadline - time.monotonic()):
                return False, None
            self.frames.fill()

    def died_while_idle(self) -> bool:
        """An idle child has nothing to say: a readable pipe means EOF (one cheap syscall)."""
        return self.ready and bool(self.poller.poll(0))

    def _wait(self, timeout_s: float) -> bool:
        """Whether the reply (or EOF) is there within the time; quicker than `conn.poll`."""
        return bool(self.poller.poll(max(math.ceil(timeout_s * 1000), 0)))

    def kill(self) -> None:
        """Kill the process now; whoever waits on its pipe sees EOF."""
        if not self.stopped and self.process.exitcode is None:
            self.process.kill()

    def stop(self, *, kill: bool = False) -> int | None:
        """Reap the process and release its resources (once); return the exit code.

        Without `kill` a healthy child gets half a second to leave its loop on EOF.
        """
        if not self.stopped:
            self.stopped = True
            self.writer.close()  # a healthy child reads EOF and leaves its loop
            self.reader.close()
            if not kill:
                self.process.join(0.5)
            if self.process.exitcode is None:
                self.process.kill()
            self.process.join()
            self.exitcode = self.process.exitcode
            self.process.close()
        return self.exitcode


class Frames:
    """The messages of a child's pipe, read in as few system calls as it allows: a read
    takes all the child wrote so far (a batch's replies often come several at once), where
    `Connection.recv` reads each message's length and body apart. The framing is
    `Connection.send`'s: a 4-byte big-endian length (-1, then an 8-byte length, past
    2 GiB), then the pickle."""

    __slots__ = ("buffer", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()

    def next(self) -> tuple[bool, Any]:
        """(True, the next whole message) when one is buffered, else (False, None)."""
        buffer = self.buffer
        start, size = self._frame()
        if size is None or len(buffer) < start + size:
            return False, None
        message = pickle.loads(buffer[start : start + size])
        del buffer[: start + size]
        return True, message

    def fill(self) -> None:
        """Read what the pipe holds (at least the rest of the message begun, when its size
        is known); EOFError when the child closed it."""
        start, size = self._frame()
        missing = 0 if size is None else start + size - len(self.buffer)
        data = os.read(self.fd, min(max(READ_BYTES, missing), READ_MAX_BYTES))
        if not data:
            raise EOFError
        self.buffer += data

    def _frame(self) -> tuple[int, int | None]:
        """Where the buffered message's pickle starts, and its size (None: not known yet)."""
        buffer = self.buffer
        if len(buffer) < 4:
            return 4, None
        (size,) = struct.unpack_from("!i", buffer)
        if size != -1:
            return 4, size
        if len(buffer) < 12:
            return 12, None
        return 12, struct.unpack_from("!Q", buffer, 4)[0]


class Printed:
    """What a call printed so far (the first `STDOUT_LIMIT` characters, as the child
    keeps them): passed on to the task's output as it comes, and the `stdout` of a call
    that never replied (timed out, crashed, canceled)."""

    __slots__ = ("output", "parts", "size")

    def __init__(self, output: TaskOutput | None) -> None:
        self.output = output
        self.parts: list[str] = []
        self.size = 0

    def add(self, text: object) -> None:
        if not isinstance(text, str):
            return
        if self.size < STDOUT_LIMIT:
            self.parts.append(text)
            self.size += len(text)
        if self.output is not None:
            self.output.live(text)

    def text(self) -> str:
        return "".join(self.parts)[:STDOUT_LIMIT]
