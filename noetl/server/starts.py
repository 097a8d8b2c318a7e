"""Starts of registered playbooks, with the catalog kept in memory.

A start by `path` used to read the playbook's latest version from the database before its
own write: a round trip and a statement per start, most of what the server asked of the
database under a burst of starts. The server now keeps what it read (`Playbooks`) and
starts from that, telling the store which version it took for the latest: the store
refuses the start, writing nothing, when a newer version is registered (by this server or
any other; `Store.create_execution`'s `latest`). The start then reads the catalog again and
starts the newer one. So a start always runs the version that was the latest when it was
written, as it did when every start read the catalog first.

A pinned version (`version` given) never changes: it is kept and started as it is.

`StartQueue` writes the starts the API decides in its event loop (`noetl.server.lean_start`):
a thread of its own takes every start waiting and writes them together, and answers each
one's future.
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from noetl.core import StalePlaybookError
from noetl.runtime.orchestrator import Orchestrator
from noetl.store.base import NewExecution, PlaybookRecord
from noetl.store.ports import CatalogPort

__all__ = ["ENTRIES", "TEXT_BYTES", "Playbooks", "StartQueue", "start_registered"]

ENTRIES = 64  # playbooks (path and version, or path for the latest) kept at most
TEXT_BYTES = 16 * 1024 * 1024  # their texts' sizes at most (characters); a bigger one is not kept


class Playbooks:
    """The registered playbooks this server started lately, by (path, version) and by
    (path, None) for the latest version it read; least recently used first out."""

    def __init__(
        self, catalog: CatalogPort, *, entries: int = ENTRIES, text_bytes: int = TEXT_BYTES
    ) -> None:
        self._catalog = catalog
        self._entries = entries
        self._text_bytes = text_bytes
        self._kept: OrderedDict[tuple[str, int | None], PlaybookRecord] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self.reads = 0  # catalog reads (read by tests)

    def get(self, path: str, version: int | None = None) -> PlaybookRecord | None:
        """The playbook at `path` (its `version`, else its latest version as last read);
        None when it is not registered (not kept: it may be registered next)."""
        key = (path, version)
        with self._lock:
            record = self._kept.get(key)
            if record is not None:
                self._kept.move_to_end(key)
                return record
            self.reads += 1
        record = self._catalog.get_playbook(path, version)
        if record is not None:
            self._keep(key, record)
        return record

    def peek(self, path: str, version: int | None = None) -> PlaybookRecord | None:
        """The playbook `get` would give, if it is kept (None: not kept; nothing is read)."""
        with self._lock:
            return self._kept.get((path, version))

    def forget(self, path: str) -> None:
        """Read the latest version of `path` again at its next start."""
        with self._lock:
            record = self._kept.pop((path, None), None)
            if record is not None:
                self._size -= len(record.text)

    def _keep(self, key: tuple[str, int | None], record: PlaybookRecord) -> None:
        if len(record.text) > self._text_bytes:
            return
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._size -= len(old.text)
            self._kept[key] = record
            self._size += len(record.text)
            while len(self._kept) > self._entries or self._size > self._text_bytes:
                _, out = self._kept.popitem(last=False)
                self._size -= len(out.text)


def start_registered(
    playbooks: Playbooks,
    orchestrator: Orchestrator,
    path: str,
    version: int | None,
    *,
    workload: dict[str, Any] | None,
    parent_execution_id: str | None = None,
) -> str | None:
    """Start the registered playbook at `path` (its `version`, else its latest); the new
    execution's id, or None when no such playbook is registered."""
    record = playbooks.get(path, version)
    if record is None:
        return None
    try:
        return orchestrator.start_execution(
            record.text,
            path=record.path,
            workload=workload,
            parent_execution_id=parent_execution_id,
            latest=record.version if version is None else None,
        )
    except StalePlaybookError:
        playbooks.forget(path)  # a newer version: read now, and started as read
    record = playbooks.get(path)
    if record is None:  # not possible (versions are never deleted); said as the route says
        return None
    return orchestrator.start_execution(
        record.text, path=record.path, workload=workload, parent_execution_id=parent_execution_id
    )


Answer = Exception | None  # a start's refusal, or None: written


class StartQueue:
    """New executions written by a thread of their own, for callers that must not block
    (the event loop): `put` returns a future at once; the thread takes every execution
    waiting (at most `limit`) and writes them with one call of `write` (the decider's
    `submit_starts`), then answers each future with that execution's refusal or None
    (or with what the call raised). The thread ends after `idle_s` with nothing to write
    and starts again with the next `put`."""

    def __init__(
        self,
        write: Callable[[list[NewExecution]], list[Answer]],
        *,
        limit: int = 64,
        idle_s: float = 30.0,
    ) -> None:
        self._write = write
        self._limit = limit
        self._idle_s = idle_s
        self._queue: queue.SimpleQueue[tuple[NewExecution, Future[Answer]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running = False
        self.calls = 0  # calls of `write` (read by tests)

    @property
    def running(self) -> bool:
        """Whether its thread runs (it ends after `idle_s` with nothing to write)."""
        with self._lock:
            return self._running

    def put(self, item: NewExecution) -> Future[Answer]:
        future: Future[Answer] = Future()
        with self._lock:
            self._queue.put((item, future))
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="noetl-starts", daemon=True).start()
        return future

    def _run(self) -> None:
        while True:
            try:
                waiting = [self._queue.get(timeout=self._idle_s)]
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._running = False
                        return
                continue
            while len(waiting) < self._limit:
                try:
                    waiting.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._answer(waiting)

    def _answer(self, waiting: list[tuple[NewExecution, Future[Answer]]]) -> None:
        self.calls += 1
        try:
            answers = self._write([item for item, _ in waiting])
            if len(answers) != len(waiting):
                raise RuntimeError(f"{len(answers)} answers for {len(waiting)} starts")
        except BaseException as exc:  # every start of the call shares its failure
            for _, future in waiting:
                future.set_exception(exc)
            if not isinstance(exc, Exception):  # this thread ends: the next `put` starts one
                with self._lock:
                    self._running = False
                raise
            return
        for (_, future), answer in zip(waiting, answers, strict=True):
            future.set_result(answer)
