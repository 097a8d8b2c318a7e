"""Wiring of the embedded runtime (store, python process pool, tool registry), and of a
local cluster (an orchestrator and a worker in threads) over a store."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from noetl.config.model import DEFAULT_DB
from noetl.core import NotFoundError
from noetl.credentials import CredentialConfig
from noetl.credentials.scope import default_provider
from noetl.decision.decider import Decider
from noetl.engine.options import EngineOptions
from noetl.errors import NoetlError
from noetl.observability import observer_for
from noetl.paths import Roots
from noetl.runtime.children import EmbeddedLauncher, StoreLauncher
from noetl.runtime.embedded import EmbeddedRuntime
from noetl.runtime.orchestrator import Orchestrator
from noetl.scripts import script_reader
from noetl.store import open_store
from noetl.store.base import ExecutionRecord, Store
from noetl.worker.python_pool import PythonPool
from noetl.worker.runner import Worker, WorkerConfig
from noetl.worker.selection import DEFAULT_INLINE_BYTES
from noetl.worker.sizing import size_worker, this_machine
from noetl.worker.tools import DEFAULT_MAX_RESULT_BYTES, default_registry

if TYPE_CHECKING:
    from noetl.observability.metrics import Metrics
    from noetl.observability.trace_context import TraceSampler
    from noetl.observability.tracing import Tracing
    from noetl.worker.output import OutputListener

__all__ = ["DEFAULT_DB", "Family", "embedded_runtime", "local_cluster", "wait_finished"]
# The `pool` label of the embedded runtime's worker metrics.
LOCAL_POOL = "local"


@contextmanager
def embedded_runtime(
    db: str = DEFAULT_DB,
    *,
    workers: int | None = None,
    secrets_file: str | None = None,
    credentials: CredentialConfig | None = None,
    metrics: Metrics | None = None,
    log_events: bool = False,
    options: EngineOptions | None = None,
    tracing: Tracing | None = None,
    sampler: TraceSampler | None = None,
    roots: Roots | None = None,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    result_inline_bytes: int = DEFAULT_INLINE_BYTES,
    on_output: OutputListener | None = None,
) -> Iterator[EmbeddedRuntime]:
    """An embedded runtime over the database `db`; everything is closed on exit. Secrets
    come from the environment and the secrets file (`secrets_file`, else
    `NOETL_SECRETS_FILE`); credentials also from the credentials file and the database
    (`credentials`: the file and the keys; see noetl.credentials). `metrics` records its
    metrics (and the store's state gauges); `log_events` writes seed 000's log events (see
    noetl.observability); `tracing` writes spans, of the executions `sampler` traces.
    `options`: the engine's defaults (the configuration's, see
    `noetl.config.Settings.engine_options`; None: the engine's own).
    `roots`: where the file sink writes and the `playbook` tool reads (None: the working
    directory; see noetl.paths). A task whose result is over `max_result_bytes` fails;
    one over `result_inline_bytes` is spilled to the result store (noetl.worker.selection).
    `on_output`: told each line a task prints or its tool logs, as it comes
    (noetl.worker.output)."""
    if workers is None:
        # A python process per core (here the deciding thread needs a core too: two a core,
        # as a worker has, ran a 10,000-item loop at 0.8x on 2 cores), and threads for the
        # other tools as a worker sizes its slots.
        machine = this_machine()
        count, io_count = machine.cores, size_worker(machine).concurrency
    else:  # N python processes, N threads for python tasks and N for other tools
        count = io_count = workers
    default_provider(secrets_file, credentials=credentials)  # bad files fail before the store
    store = open_store(db)
    observer = observer_for(
        metrics=metrics,
        logs=log_events,
        pool=LOCAL_POOL,
        tracing=tracing,
        load_events=store.load_events,
        complexity_warn=options.complexity_warn if options is not None else None,
    )
    if metrics is not None:
        from noetl.observability.store_gauges import StoreGauges  # noqa: PLC0415

        metrics.registry.register(StoreGauges(store))
    try:
        provider = default_provider(secrets_file, credentials=credentials, store=store.credentials)
        with PythonPool(processes=count) as pool:
            # Child executions run in this same runtime.
            launcher = EmbeddedLauncher(scripts=script_reader((roots or Roots.here()).playbooks))
            registry = default_registry(
                pool,
                secrets=provider,
                launcher=launcher,
                observer=observer,
                roots=roots,
                max_result_bytes=max_result_bytes,
                result_inline_bytes=result_inline_bytes,
                results=store.results,
                checkpoints=store.checkpoints,
                on_output=on_output,
            )
            runtime = EmbeddedRuntime(
                store,
                registry,
                workers=count,
                io_workers=io_count,
                observer=observer,
                options=options,
                sampler=sampler,
            )
            launcher.bind(runtime)
            try:
                yield runtime
            finally:
                runtime.close()
                registry.close()
    finally:
        store.close()


class Family:
    """The executions a command works for: one execution and its descendants (children
    its `playbook` steps start), read from the store at most every `refresh_s` seconds.
    A scoped worker and orchestrator ask it before each claim."""

    def __init__(self, store: Store, execution_id: str, *, refresh_s: float = 0.5) -> None:
        self.store = store
        self.execution_id = execution_id
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._ids: frozenset[str] = frozenset({execution_id})
        self._read_at = float("-inf")

    def __call__(self) -> frozenset[str]:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= self.refresh_s:
                self._read_at = now
                # The root stays in scope even if it cannot be read: never widen to "any".
                found = self.store.execution_family(self.execution_id)
                self._ids = frozenset({self.execution_id, *found})
            return self._ids


@contextmanager
def local_cluster(
    store: Store,
    execution_id: str,
    *,
    workers: int | None = None,
    secrets_file: str | None = None,
    credentials: CredentialConfig | None = None,
    options: EngineOptions | None = None,
    roots: Roots | None = None,
) -> Iterator[Orchestrator]:
    """An orchestrator and a worker as threads of this process over `store`, scoped to
    ONE execution and its child executions: what `noetl dlq replay --run-here` uses to
    carry an execution on in the operator's process. On a shared database they never
    take another execution's task or input.

    On exit the worker stops claiming, the tasks it is running finish and report, and
    tasks it claimed but did not start go back to the queue; then the orchestrator
    decides what they reported. A KeyboardInterrupt while waiting for running tasks
    (a second Ctrl-C) gives them back to the queue too, their outcomes dropped, before
    the python pool is closed: nothing it held is left half-run or reported failed
    because this process stopped."""
    count = workers or os.cpu_count() or 2
    family = Family(store, execution_id)
    stop_worker = threading.Event()
    stop_orchestrator = threading.Event()
    owner = f"local:{os.getpid()}"
    with PythonPool(processes=count) as pool:
        scripts = script_reader((roots or Roots.here()).playbooks)
        orchestrator = Orchestrator(
            store, owner=owner, options=options, scope=family, scripts=scripts
        )
        decider = Decider(store, options=options, scripts=scripts)
        registry = default_registry(
            pool,
            secrets=default_provider(
                secrets_file, credentials=credentials, store=store.credentials
            ),
            launcher=StoreLauncher(decider, stopping=stop_worker.is_set),
            roots=roots,
            results=store.results,
            checkpoints=store.checkpoints,
        )
        worker = Worker(
            store,
            registry,
            WorkerConfig(concurrency=count, poll_s=0.05, worker_id=owner),
            decider=decider,
            scope=family,
        )
        deciding = threading.Thread(
            target=orchestrator.serve,
            args=(stop_orchestrator.is_set,),
            kwargs={"idle_wait": 0.05},
            name="noetl-local-orchestrator",
            daemon=True,
        )
        working = threading.Thread(
            target=worker.run, args=(stop_worker.is_set,), name="noetl-local-worker", daemon=True
        )
        deciding.start()
        working.start()
        try:
            yield orchestrator
        finally:
            worker.drain()  # running tasks finish and report; nothing new is claimed
            try:
                while working.is_alive():
                    working.join(0.1)
            except KeyboardInterrupt:
                stop_worker.set()
                worker.abandon()  # first: the failures closing the pool causes are dropped
                pool.close()
                working.join(timeout=30)
            stop_orchestrator.set()
            deciding.join(timeout=30)
            if not deciding.is_alive():
                # What the last tasks reported is decided now, not left for a later reader.
                with contextlib.suppress(NoetlError):
                    orchestrator.run_once()
            registry.close()


def wait_finished(
    store: Store,
    execution_id: str,
    *,
    after_seq: int = 0,
    timeout: float | None = None,
    poll_s: float = 0.05,
) -> ExecutionRecord:
    """Wait until the execution's row is terminal with events past `after_seq` (so an
    execution reopened after that sequence is waited for); TimeoutError after `timeout`
    seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        record = store.get_execution(execution_id)
        if record is None:
            raise NotFoundError(f"execution {execution_id} not found")
        if record.status.terminal and record.last_seq > after_seq:
            return record
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"execution {execution_id} is still {record.status.value}")
        time.sleep(poll_s)
