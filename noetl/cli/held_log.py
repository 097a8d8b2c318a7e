"""The log lines of a `noetl run` held until it ends: printed when the run fails, dropped
(with a one-line note) when it ends ok, so a failure the playbook handled prints no raw
WARNING lines. `--log-level` (or `logging.level`) prints them as they come instead."""

from __future__ import annotations

import io
import sys
import threading
from typing import IO

__all__ = ["MAX_HELD_CHARS", "CurrentStderr", "HeldLog"]

MAX_HELD_CHARS = 1_000_000  # past it, the oldest lines are dropped (and counted)


class HeldLog(io.TextIOBase):
    """A text stream that keeps what is written to it, up to MAX_HELD_CHARS."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._chars = 0
        self.dropped = 0
        self.released = False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            if self.released:  # the run ended: what comes after goes straight out
                sys.stderr.write(text)
                return len(text)
            self._lines.append(text)
            self._chars += len(text)
            while self._chars > MAX_HELD_CHARS and len(self._lines) > 1:
                self._chars -= len(self._lines.pop(0))
                self.dropped += 1
        return len(text)

    @property
    def count(self) -> int:
        """How many log lines are held."""
        with self._lock:
            return sum(text.count("\n") for text in self._lines)

    def discard(self) -> int:
        """Drop what is held (and hold nothing more); how many lines it was."""
        count = self.count
        with self._lock:
            self._lines, self._chars, self.released = [], 0, True
        return count

    def release(self, stream: IO[str]) -> None:
        """Write what is held to `stream`, and hold nothing more."""
        with self._lock:
            lines, self._lines, self._chars = self._lines, [], 0
            self.released = True
        if self.dropped:
            stream.write(f"({self.dropped} earlier log lines were dropped)\n")
        stream.write("".join(lines))
        stream.flush()


class CurrentStderr(io.TextIOBase):
    """Writes to whatever `sys.stderr` is at the time of each write: while the live view
    runs, rich puts its own stream there, which prints each log line above the live
    region instead of through it."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()
