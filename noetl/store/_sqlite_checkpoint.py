"""Checkpoints of a SQLite file's write-ahead log, off the writing thread.

In WAL mode every commit appends its pages to the `-wal` file, and by default the commit
that takes the log past 1,000 pages copies the log back into the database file and syncs
it (a checkpoint) before it returns: a few milliseconds, paid by one commit in a hundred
or so, on the thread that decides what runs next. Here the writing connection checkpoints
never (`wal_autocheckpoint = 0`), and a thread of its own, on a connection of its own,
runs a passive checkpoint (it never blocks a writer or a reader) every `interval_s` in
which something was committed. SQLite works outside the interpreter lock meanwhile, so
the copy overlaps the writer's work instead of stalling it.

The log stays bounded by what is committed in an interval (and a checkpoint that cannot
finish, because a reader still needs old pages, is tried again at the next one). Closing
the writing connection, the last one, checkpoints the rest and removes the log, as before.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger("noetl.store")

INTERVAL_S = 0.1


class Checkpointer:
    """Runs passive checkpoints of one SQLite file from a daemon thread (see the module).
    `committed()` tells it the connection was used; `stop()` ends the thread."""

    def __init__(self, path: Path, *, interval_s: float = INTERVAL_S) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA cache_size = -256")  # it reads the log, not the tables
        self._interval_s = interval_s
        self._commits = 0
        self._done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="noetl-sqlite-checkpoint", daemon=True
        )
        self._thread.start()

    def committed(self) -> None:
        """The writing connection was used, maybe to commit (a counter, nothing else)."""
        self._commits += 1

    def stop(self) -> None:
        """End the thread and close its connection (the writer's close checkpoints the
        rest)."""
        self._stop.set()
        self._thread.join(timeout=10.0)
        self._conn.close()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            seen = self._commits
            if seen == self._done:
                continue  # nothing committed since the last checkpoint
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error as exc:  # busy, or the file went away: the next one retries
                log.debug("a checkpoint of the SQLite log did not run: %s", exc)
                continue
            self._done = seen
