"""Holders of inbox inputs: their tokens, and how a store on one machine tells that one is gone.

An orchestrator claims inbox inputs under the token of a holder (`Store.open_holder`). A
token is new for every holder: `{owner}#{host}/{pid}/{start}/{nonce}`, where `owner` is the
name people read (`host:pid` for a server), `start` the process's start time as the kernel
counts it (empty where it cannot be read) and `nonce` 16 random hex digits. So a restarted
process that reuses its owner name (or its pid, as in a container where every server is
pid 1) never takes the token of the process that died, and "this token's holder is gone"
stays true for good once it is true: a gone token never claims again.

How a store tells that a holder is gone differs by adapter: PostgreSQL by the holder's
session-level advisory lock (`noetl.store._pg_holder`); SQLite by the holder's process
(`process_gone` below: a SQLite file is shared only by processes of one machine); the
memory store by the holders it has open.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import threading
from dataclasses import dataclass

# What a holder token looks like (anything else in `claimed_by`, a plain owner name or
# 'timer', is never judged gone: its hold simply expires).
TOKEN_PATTERN = r"#([^#/]+)/([0-9]+)/([0-9]*)/([0-9a-f]{16})$"
_TOKEN = re.compile(TOKEN_PATTERN)


@dataclass(frozen=True, slots=True)
class HolderId:
    """The parts of a holder token."""

    owner: str
    host: str
    pid: int
    start: str
    nonce: str

    @property
    def token(self) -> str:
        return f"{self.owner}#{self.host}/{self.pid}/{self.start}/{self.nonce}"


def new_holder(owner: str) -> HolderId:
    """A holder id for this process, never given before."""
    pid = os.getpid()
    return HolderId(owner, _host(), pid, process_start(pid), secrets.token_hex(8))


def parse(token: str | None) -> HolderId | None:
    """The holder id in `token`, or None when it is not a holder token."""
    if not token:
        return None
    match = _TOKEN.search(token)
    if match is None:
        return None
    host, pid, start, nonce = match.groups()
    return HolderId(token[: match.start()], host, int(pid), start, nonce)


def _host() -> str:
    # '#' and '/' separate the token's parts; a host name holds neither, but be sure.
    return socket.gethostname().replace("#", "_").replace("/", "_") or "localhost"


def process_start(pid: int) -> str:
    """When process `pid` started, in clock ticks since boot (Linux `/proc/<pid>/stat`,
    field 22); "" where it cannot be read (another system, no such process)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return ""
    # The command name (field 2) is in parentheses and may hold spaces and parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    # fields[0] is field 3 (the state); the start time is field 22.
    return fields[19] if len(fields) > 19 else ""


def _zombie(pid: int) -> bool:
    """Whether `pid` has exited and only waits for its parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] in ("Z", "X")


class LocalHolders:
    """The holders this process has open (SQLite: one registry per process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[str] = set()

    def add(self, token: str) -> None:
        with self._lock:
            self._open.add(token)

    def discard(self, token: str) -> None:
        with self._lock:
            self._open.discard(token)

    def __contains__(self, token: object) -> bool:
        with self._lock:
            return token in self._open


# The holders of SQLite files this process has open, whatever file they hold inputs of.
PROCESS_HOLDERS = LocalHolders()


class LocalHolder:
    """An input holder whose life is its entry in a `LocalHolders` registry (the memory
    store's own, or this process's for SQLite)."""

    def __init__(self, registry: LocalHolders, owner: str) -> None:
        self._registry = registry
        self.token = new_holder(owner).token
        registry.add(self.token)

    def alive(self) -> bool:
        return self.token in self._registry

    def close(self) -> None:
        self._registry.discard(self.token)


def process_gone(holder: HolderId, local: LocalHolders) -> bool:
    """Whether the holder is known to be gone, judged on this machine.

    True when it was this process's and is closed, or when its process ended: no process
    has its pid, or the one that has it started at another time (a pid used again). A
    holder of another host is never judged gone here: nothing on this machine can tell,
    so its hold expires as before."""
    if holder.host != _host():
        return False
    if holder.pid == os.getpid() and holder.start == process_start(holder.pid):
        return holder.token not in local
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # a process of another user has the pid: judged by its start time below
    except OSError:
        return False
    if _zombie(holder.pid):
        return True
    start = process_start(holder.pid)
    return bool(holder.start and start and start != holder.start)
