"""The server's own worker for handed-off sinks (`sinks.in_worker: false`).

With sinks run outside the workers (noetl.engine.handoff), every `noetl server start`
serves the `sinks.pool`: a worker thread in the server's process that leases `sinks`
tasks and writes their results through the sinks, with the server's secrets, file root
and network. It runs nothing else: its registry holds the `sinks` tool only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from noetl.bus import TaskBus
from noetl.config import Settings
from noetl.credentials.scope import default_provider
from noetl.observability import Observer
from noetl.paths import data_dir
from noetl.sinks import REGISTRY, SinkRegistry
from noetl.store.base import Store
from noetl.worker.runner import Worker, WorkerConfig, default_worker_id
from noetl.worker.tools import SinksTool, ToolRegistry

__all__ = ["SinkRunner", "sink_connections", "start_sink_runner", "stop_sink_runner"]

_SERVER_CONNECTIONS = 10  # what a server's store holds without sinks to run


class SinkRunner:
    """A worker thread of the sinks pool; `stop` drains it (its writes finish first)."""

    def __init__(self, worker: Worker, tools: ToolRegistry) -> None:
        self.worker = worker
        self.tools = tools
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="noetl-sink-runner", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        self.worker.run(self._stop.is_set)

    def stop(self, timeout_s: float = 10.0) -> None:
        self.worker.drain()
        self._thread.join(timeout=timeout_s)
        if self._thread.is_alive():
            self._stop.set()  # still writing: hand its tasks back to the queue
            self._thread.join(timeout=timeout_s)
        self.tools.close()


def sink_connections(settings: Settings) -> int | None:
    """The connections a server's store needs when sinks run in it (one for each of their
    task slots, their reporter, heartbeats and claim loop, besides the server's own);
    None (the store's default) when they do not."""
    if settings.sinks.in_worker:
        return None
    return _SERVER_CONNECTIONS + settings.sinks.concurrency + 4


def start_sink_runner(
    settings: Settings,
    store: Store,
    *,
    observer: Observer,
    bus: TaskBus | None = None,
    log: Callable[[str], None] = lambda text: None,
) -> SinkRunner | None:
    """Start the sink runner when `settings.sinks.in_worker` is false; None otherwise."""
    if settings.sinks.in_worker:
        return None
    from noetl.sinks.file import FileWriter  # only where sinks run here

    roots = settings.roots(data_dir(os.environ))
    secrets = default_provider(
        settings.secrets.file,
        credentials=settings.credentials.config(),
        store=store.credentials,
    )
    sinks = SinkRegistry([FileWriter(roots.sinks)], builtins=False, parent=REGISTRY)
    tools = ToolRegistry([SinksTool()], secrets=secrets, observer=observer, sinks=sinks)
    pool = settings.sinks.pool
    config = WorkerConfig(
        pool=pool,
        concurrency=settings.sinks.concurrency,
        lease_s=settings.worker.lease_s,
        poll_s=settings.worker.poll_s,
        worker_id=default_worker_id(pool),
    )
    runner = SinkRunner(Worker(store, tools, config, observer=observer, bus=bus), tools)
    runner.start()
    log(
        f"sinks run here: pool {pool}, concurrency {settings.sinks.concurrency}, "
        f"file sink root {roots.sinks}"
    )
    return runner


def stop_sink_runner(runner: SinkRunner | None) -> None:
    """Drain and stop `runner`, when there is one."""
    if runner is not None:
        runner.stop()
