"""The worker's task threads: a bounded pool of daemon threads, and threads of their own.

`concurrent.futures.ThreadPoolExecutor` joins its threads when the interpreter exits, so a
worker told to stop at once would still wait for a tool that cannot be interrupted (an
HTTP call, a query) to return. The tasks of a stopped worker are handed back to the queue
(`Store.release`); their threads must not keep the process alive, so these are daemons.

Tasks whose tool waits for other tasks (`playbook`: a child execution, see
`ToolRegistry.waits`) run in threads of their own (`spawn`), outside the pool: a pool
whose threads all held waiting parents could otherwise never run the children's tasks.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("noetl.worker")

Call = tuple[Callable[[Any], object], Any]


class TaskThreads:
    """Runs `fn(arg)` calls on at most `size` daemon threads, started as needed."""

    def __init__(self, size: int, name: str = "noetl-task") -> None:
        self._size = size
        self._name = name
        self._calls: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self._own: set[threading.Thread] = set()  # threads of their own (`spawn`)

    def submit(self, fn: Callable[[Any], object], arg: Any) -> None:
        """Queue a call; RuntimeError after `shutdown`, or when no thread can be started."""
        if self._closed:
            raise RuntimeError("the task threads are shut down")
        self._calls.put((fn, arg))
        if self._idle.acquire(blocking=False):
            return  # an idle thread takes it
        with self._lock:
            # A thread that died (it cannot, short of interpreter shutdown) is replaced.
            self._threads = [t for t in self._threads if t.is_alive()]
            if len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._loop, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def _loop(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                self._calls.put(None)  # for the next thread
                return
            fn, arg = call
            try:
                fn(arg)
            except Exception:  # the callers guard themselves; this keeps the thread
                log.exception("a task thread's call failed")
            self._idle.release()

    def shutdown(self, *, wait: bool, timeout: float | None = None) -> None:
        """Take no more calls; with `wait`, wait (up to `timeout` seconds in all) for the
        queued and running ones to finish."""
        self._closed = True
        self._calls.put(None)
        if not wait:
            return
        with self._lock:
            threads = list(self._threads)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(timeout=None if deadline is None else max(deadline - time.monotonic(), 0))

    def spawn(self, fn: Callable[[Any], object], arg: Any, name: str) -> None:
        """Run `fn(arg)` in a daemon thread of its own; RuntimeError when it cannot be
        started."""
        thread = threading.Thread(target=self._run_own, args=(fn, arg), name=name, daemon=True)
        with self._lock:
            self._own.add(thread)
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._own.discard(thread)
            raise

    def _run_own(self, fn: Callable[[Any], object], arg: Any) -> None:
        try:
            fn(arg)
        finally:
            with self._lock:
                self._own.discard(threading.current_thread())

    def join_own(self, timeout: float) -> None:
        """Wait for the threads of their own still running, up to `timeout` seconds each."""
        with self._lock:
            threads = list(self._own)
        for thread in threads:
            thread.join(timeout=timeout)
