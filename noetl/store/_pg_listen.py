"""LISTEN/NOTIFY for the PostgreSQL store: one connection per process, in a thread."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg

CHANNELS = {"tasks": "noetl_tasks", "inputs": "noetl_inputs"}
CONNECT_TIMEOUT_S = 5

log = logging.getLogger("noetl.store.postgres")
Conn = psycopg.Connection[tuple[Any, ...]]


class Listener:
    """One connection LISTENing on the noetl channels in a daemon thread, started on the
    first `wait`; waiters sleep on a condition until a channel's counter moves.

    It listens only on the channels somebody waits for (a worker on "tasks", a server on
    "inputs"), so a notification wakes only the processes that need it. Each thread
    remembers the counter it saw last, so a notification that arrives between two waits of
    a thread wakes its next wait at once instead of being lost. While the connection is
    down, waits simply time out (the caller polls) and the thread reconnects with backoff;
    after a reconnect every waiter is woken, since notifications sent meanwhile are gone.
    """

    POLL_S = 0.25  # how often the thread looks at its stop flag and for new channels

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._cond = threading.Condition()
        self._counts = dict.fromkeys(CHANNELS.values(), 0)
        self._wanted: set[str] = set()
        self._listening: set[str] = set()
        self._seen = threading.local()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wait(self, channel: str, timeout: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout)
        self._start(channel)
        seen: dict[str, int] = self._seen.__dict__
        with self._cond:
            # Until LISTEN is in place (or the connection failed), this is a plain sleep.
            self._cond.wait_for(
                lambda: channel in self._listening or self._stop.is_set(),
                max(0.0, min(timeout, CONNECT_TIMEOUT_S)),
            )
            last = seen.get(channel, self._counts[channel])
            woken = self._cond.wait_for(
                lambda: self._counts[channel] != last or self._stop.is_set(),
                max(0.0, deadline - time.monotonic()),
            )
            seen[channel] = self._counts[channel]
        return bool(woken) and not self._stop.is_set()

    def _start(self, channel: str) -> None:
        with self._cond:
            self._wanted.add(channel)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="noetl-pg-listen", daemon=True
                )
                self._thread.start()

    def _bump(self, channels: Sequence[str]) -> None:
        with self._cond:
            for channel in channels:
                if channel in self._counts:
                    self._counts[channel] += 1
            self._cond.notify_all()

    def _listen_new(self, conn: Conn) -> None:
        """LISTEN on the channels waited for since the last call."""
        with self._cond:
            new = sorted(self._wanted - self._listening)
        for channel in new:
            conn.execute(f"LISTEN {channel}".encode())
        if new:
            with self._cond:
                self._listening.update(new)
                self._cond.notify_all()

    def _run(self) -> None:
        delay = 0.1
        connected_before = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    with self._cond:
                        self._listening.clear()
                    self._listen_new(conn)
                    if connected_before:  # a reconnect: what was sent meanwhile is lost
                        self._bump(list(CHANNELS.values()))
                    connected_before = True
                    delay = 0.1
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=self.POLL_S):
                            self._bump([note.channel])
                        self._listen_new(conn)
            except psycopg.Error as exc:
                log.debug("LISTEN connection failed (%s); polling until it is back", exc)
                with self._cond:  # waiters fall back to their timeout
                    self._listening.clear()
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=self.POLL_S + CONNECT_TIMEOUT_S + 1)
