"""`noetl worker start` and `noetl worker drain`."""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

import click

from noetl.cli.bus_opt import bus_option, close_store, open_store_with_bus
from noetl.cli.heap import settle
from noetl.cli.observe import (
    exporter_metrics,
    log_options,
    metrics_options,
    serve_metrics,
    setup_logging,
    setup_tracing,
)
from noetl.cli.settings import db_option, setting_option, with_settings
from noetl.config import Settings
from noetl.credentials.scope import default_provider
from noetl.decision.decider import Decider
from noetl.paths import data_dir
from noetl.runtime.children import StoreLauncher
from noetl.scripts import script_reader
from noetl.store import open_store
from noetl.worker.python_pool import PythonPool
from noetl.worker.runner import Worker, WorkerConfig, default_worker_id
from noetl.worker.sizing import size_worker, this_machine
from noetl.worker.tools import default_registry


@click.group("worker")
def worker_group() -> None:
    """Workers: lease tasks from the database and run them."""


@worker_group.command("start")
@setting_option("worker.pool", "--pool", help="The pool tasks are taken from.")
@setting_option(
    "worker.concurrency",
    "--concurrency",
    type=click.IntRange(1, 512),
    help="Tasks run at once.",
    default_text="16 per core, 8 to 32, within memory",
)
@setting_option(
    "worker.python_processes",
    "--python-processes",
    type=click.IntRange(1, 512),
    help="Child processes that run python tasks. Fewer than the concurrency suits short "
    "tasks: the slots keep the queue busy, the processes the CPU.",
    default_text="4 per core, within memory and the concurrency",
)
@setting_option(
    "worker.lease_s",
    "--lease",
    type=click.FloatRange(0, 3600, min_open=True),
    help="Lease length in seconds (heartbeats every third of it).",
)
@setting_option(
    "worker.poll_s",
    "--poll",
    type=click.FloatRange(0, 60, min_open=True),
    help="Polling interval in seconds when no notification arrives.",
)
@setting_option(
    "worker.continue",
    "--continue/--no-continue",
    help="Decide what follows a task that was its execution's only one in flight here, "
    "and run the next task at once (else every outcome goes to the server).",
)
@setting_option(
    "worker.chain_steps",
    "--chain-steps",
    type=click.IntRange(0, 64),
    help="Short python steps a worker may run past a task it continues before it commits "
    "them together (0: commit each step on its own).",
)
@bus_option
@setting_option(
    "secrets.file",
    "--secrets-file",
    type=click.Path(dir_okay=False),
    help="YAML or JSON file with `secrets:` and `credentials:` (besides NOETL_SECRET_<NAME>).",
)
@setting_option(
    "credentials.file",
    "--credentials-file",
    type=click.Path(dir_okay=False),
    help="YAML or JSON file of named credential records ({type, data}, upstream's format).",
)
@log_options("INFO")
@metrics_options(port=True)
@db_option
@with_settings
def worker_start(*, settings: Settings) -> None:
    """Run a worker until SIGTERM / Ctrl-C, which drain it: in-flight tasks finish first.
    A second signal stops it at once: its running tasks are stopped and handed back to
    the queue for another worker. With --metrics-port, its metrics are served at
    http://HOST:PORT/metrics.

    The file sink writes, and the playbook tool reads child playbooks that are not in the
    catalog, under the data directory ($XDG_DATA_HOME/noetl, else ~/.local/share/noetl)
    unless sinks.file.root / playbooks.root (NOETL_SINKS_FILE_ROOT, NOETL_PLAYBOOKS_ROOT)
    name another root; paths outside it are refused."""
    from noetl.observability import observer_for
    from noetl.observability.trace_context import sampler_of

    setup_logging(settings, "INFO")
    config = settings.worker
    pool = config.pool
    sizing = size_worker(
        this_machine(),
        concurrency=config.concurrency,
        python_processes=config.python_processes,
    )
    count, processes = sizing.concurrency, sizing.python_processes
    worker_id = default_worker_id(pool)
    roots = settings.roots(data_dir(os.environ))
    # Metrics are recorded only where they can be scraped.
    metrics = exporter_metrics(settings)
    exporter = None
    credentials = settings.credentials.config()
    # A bad secrets or credentials file stops the worker before it opens anything.
    default_provider(settings.secrets.file, credentials=credentials)
    tracing = setup_tracing(settings, "noetl-worker")
    # A connection for each task slot, the reporter, heartbeats and the claim loop.
    # Continuations queue tasks here too: they are announced like the server's.
    store, bus = open_store_with_bus(settings, connections=count + 4)
    observer = observer_for(
        metrics=metrics,
        pool=pool,
        worker_id=worker_id,
        tracing=tracing,
        load_events=store.load_events,
        complexity_warn=settings.complexity.warn,
    )
    stop = threading.Event()
    try:
        if metrics is not None and settings.metrics.port is not None:
            exporter = serve_metrics(metrics, settings.metrics.port, settings.metrics.host)
        with PythonPool(processes=processes) as python_pool:
            # Continuations decide here with the same engine defaults as the servers'.
            decider = Decider(
                store,
                pool=pool,
                observer=observer,
                options=settings.engine_options(),
                sampler=sampler_of(settings.tracing),
                scripts=script_reader(roots.playbooks),
                dsl=settings.dsl.policy(),
            )
            # Child executions (the playbook tool) are created in the store, their tasks
            # in this worker's pool; a hard stop ends the waits (the lease then expires and
            # the re-run task finds its child).
            launcher = StoreLauncher(decider, stopping=stop.is_set)
            tools = default_registry(
                python_pool,
                secrets=default_provider(
                    settings.secrets.file, credentials=credentials, store=store.credentials
                ),
                launcher=launcher,
                observer=observer,
                roots=roots,
                max_result_bytes=settings.worker.max_result_bytes,
                result_inline_bytes=settings.worker.result_inline_bytes,
                results=store.results,
                checkpoints=store.checkpoints,
            )
            worker = Worker(
                store,
                tools,
                WorkerConfig(
                    pool=pool,
                    concurrency=count,
                    lease_s=config.lease_s,
                    poll_s=config.poll_s,
                    worker_id=worker_id,
                    chain_steps=config.chain_steps,
                    chain_ms=config.chain_ms,
                ),
                decider=decider if config.continue_ else None,
                observer=observer,
                bus=bus,
            )

            signals: list[int] = []

            def _on_signal(signum: int, frame: FrameType | None) -> None:
                signals.append(signum)
                if len(signals) == 1:
                    worker.drain()  # finish what is in flight, then exit
                else:
                    stop.set()  # stop now: the running tasks go back to the queue

            signal.signal(signal.SIGTERM, _on_signal)
            signal.signal(signal.SIGINT, _on_signal)
            click.echo(
                f"worker {worker.worker_id} started (pool {pool}, concurrency {count}, "
                f"{processes} python processes; "
                f"file sink root {roots.sinks}, playbooks root {roots.playbooks})",
                err=True,
            )
            settle()  # start-up is over: its objects stay out of the collector's walks
            stats = worker.run(stop.is_set)
            click.echo(
                f"worker {worker.worker_id} stopped: {stats.completed + stats.continued} "
                f"completed ({stats.continued} decided here), "
                f"{stats.rejected} refused, {stats.lost} lost, "
                f"{stats.released} handed back",
                err=True,
            )
            tools.close()
            if stats.failure is not None:
                raise click.ClickException(f"worker {worker.worker_id}: {stats.failure}")
    finally:
        if exporter is not None:
            exporter.close()
        if tracing is not None:
            tracing.shutdown()  # exports the spans still queued
        close_store(store, bus)


@worker_group.command("drain")
@click.option("--pool", default=None, help="Only workers of this pool (default: all).")
@db_option
@with_settings
def worker_drain(*, pool: str | None, settings: Settings) -> None:
    """Ask running workers to stop taking tasks, finish what they hold, and exit."""
    store = open_store(settings.db.url)
    try:
        count = store.request_drain(pool)
    finally:
        store.close()
    click.echo(f"{count} worker(s) asked to drain")
