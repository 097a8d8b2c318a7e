"""A worker's heartbeats: its tasks' leases kept alive, and its own row.

Every interval (a third of the lease by default) one thread extends the lease of every task
the worker holds, quoting its fencing token, and records the worker alive. What a beat
learns: a lease no longer held (the task is lost: its outcome will not be reported), an
execution that asked its task to stop (the running code is stopped, as `ToolRegistry.cancel`
can), and a drain asked of this worker (`noetl worker drain`).

Only tasks some thread is running are held here (`noetl.worker.runner` drops a task once
its thread is done with it, whatever happened), so a beat never keeps dead work alive; and
should this thread die, `ensure_running` starts another.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from noetl.observability import NOOP, Observer
from noetl.store.base import Lease, Store

log = logging.getLogger("noetl.worker")


@dataclass
class InFlight:
    """A task the worker holds."""

    lease: Lease
    lost: bool = False  # the lease is gone (or handed back): do not report its outcome
    waits: bool = False  # its tool waits for other tasks: outside the claim window


class Heartbeats:
    """The heartbeat thread of one worker."""

    def __init__(
        self,
        store: Store,
        *,
        worker_id: str,
        pool: str,
        lease_s: float,
        interval: float,
        held: Callable[[], list[InFlight]],
        cancel: Callable[[str], bool],
        drain: Callable[[], None],
        observer: Observer = NOOP,
    ) -> None:
        self.store = store
        self.worker_id = worker_id
        self.pool = pool
        self.lease_s = lease_s
        self.interval = interval
        self._held = held
        self._cancel = cancel
        self._drain = drain
        self.observer = observer
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        thread = threading.Thread(target=self._loop, name="noetl-heartbeat", daemon=True)
        thread.start()
        self._thread = thread

    def ensure_running(self) -> bool:
        """Start a new thread if the current one died; True when one had to be.
        RuntimeError when no thread can be started."""
        if self._stopped.is_set() or self._thread is None or self._thread.is_alive():
            return False
        log.error("the heartbeat thread died; starting another")
        self.start()
        return True

    def stop(self, timeout: float) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        while not self._stopped.wait(self.interval):
            try:
                self.beat_once()
            except Exception:  # the next beat tries again; a lease lasts three intervals
                log.exception("heartbeat failed")

    def beat_once(self) -> None:
        for entry in self._held():
            if entry.lost:
                continue
            task_id = entry.lease.task.task_id
            try:
                answer = self.store.heartbeat(task_id, entry.lease.token, lease_s=self.lease_s)
            except Exception as exc:
                log.warning("heartbeat of %s failed: %s", task_id, exc)
                continue
            # The execution was canceled: stop the running code (an inline python task's
            # child is killed); the failed outcome is reported as usual and the engine
            # discards it. Asked again at every beat until the task ends, in case it had
            # not reached its tool yet.
            if answer.cancel and self._cancel(task_id):
                log.info("canceled running task %s", task_id)
            if not answer.alive:
                entry.lost = True
        try:
            status = self.store.worker_heartbeat(self.worker_id)
        except Exception as exc:
            log.warning("worker heartbeat failed: %s", exc)
            return
        self.observer.heartbeat(self.worker_id, self.pool, time.time())
        if status == "draining":
            self._drain()
