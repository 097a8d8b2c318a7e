"""`noetl worker start` and `noetl worker drain`."""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

import click

from noetl.cli.observe import (
    log_options,
    metrics_options,
    new_metrics,
    serve_metrics,
    setup_logging,
)
from noetl.cli.run_cmd import db_option
from noetl.runtime.children import StoreLauncher
from noetl.runtime.decider import Decider
from noetl.store import open_store
from noetl.worker.python_pool import PythonPool
from noetl.worker.runner import Worker, WorkerConfig, default_worker_id
from noetl.worker.secrets import default_provider
from noetl.worker.tools import default_registry


@click.group("worker")
def worker_group() -> None:
    """Workers: lease tasks from the database and run them."""


@worker_group.command("start")
@click.option("--pool", default="default", envvar="NOETL_WORKER_POOL", show_default=True)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 512),
    envvar="NOETL_WORKER_CONCURRENCY",
    help="Tasks run at once (default: CPU count).",
)
@click.option(
    "--python-processes",
    type=click.IntRange(1, 512),
    envvar="NOETL_WORKER_PYTHON_PROCESSES",
    help="Child processes that run python tasks (default: the concurrency). Fewer than "
    "the concurrency suits short tasks: the slots keep the queue busy, the processes the CPU.",
)
@click.option(
    "--lease",
    "lease_s",
    type=float,
    default=30.0,
    envvar="NOETL_WORKER_LEASE_S",
    show_default=True,
    help="Lease length in seconds (heartbeats every third of it).",
)
@click.option(
    "--poll",
    "poll_s",
    type=float,
    default=0.5,
    envvar="NOETL_WORKER_POLL_S",
    show_default=True,
    help="Polling interval when no notification arrives.",
)
@click.option(
    "--continue/--no-continue",
    "continue_",
    default=True,
    envvar="NOETL_WORKER_CONTINUE",
    show_default=True,
    help="Decide what follows a task that was its execution's only one in flight here, "
    "and run the next task at once (else every outcome goes to the server).",
)
@click.option(
    "--secrets-file",
    type=click.Path(dir_okay=False),
    envvar="NOETL_SECRETS_FILE",
    help="YAML or JSON file with `secrets:` and `credentials:` (besides NOETL_SECRET_<NAME>).",
)
@log_options("INFO")
@metrics_options(port=True)
@db_option
def worker_start(
    *,
    pool: str,
    concurrency: int | None,
    python_processes: int | None,
    lease_s: float,
    poll_s: float,
    continue_: bool,
    secrets_file: str | None,
    log_level: str,
    log_format: str,
    metrics_enabled: bool,
    metrics_port: int | None,
    metrics_host: str,
    db: str,
) -> None:
    """Run a worker until SIGTERM / Ctrl-C (which drain it: in-flight tasks finish first).
    With --metrics-port, its metrics are served at http://HOST:PORT/metrics."""
    from noetl.observability import observer_for

    setup_logging(log_level, log_format)
    count = concurrency or os.cpu_count() or 2
    worker_id = default_worker_id(pool)
    # Metrics are recorded only where they can be scraped.
    metrics = new_metrics() if metrics_enabled and metrics_port is not None else None
    observer = observer_for(metrics=metrics, pool=pool, worker_id=worker_id)
    exporter = None
    # A connection for each task slot, the reporter, heartbeats and the claim loop.
    store = open_store(db, connections=count + 4)
    stop = threading.Event()
    try:
        if metrics is not None and metrics_port is not None:
            exporter = serve_metrics(metrics, metrics_port, metrics_host)
        with PythonPool(processes=min(python_processes or count, count)) as python_pool:
            decider = Decider(store, pool=pool, observer=observer)
            # Child executions (the playbook tool) are created in the store, their tasks
            # in this worker's pool; a hard stop ends the waits (the lease then expires and
            # the re-run task finds its child).
            launcher = StoreLauncher(decider, stopping=stop.is_set)
            tools = default_registry(
                python_pool,
                secrets=default_provider(secrets_file),
                launcher=launcher,
                observer=observer,
            )
            config = WorkerConfig(
                pool=pool, concurrency=count, lease_s=lease_s, poll_s=poll_s, worker_id=worker_id
            )
            worker = Worker(
                store,
                tools,
                config,
                decider=decider if continue_ else None,
                observer=observer,
            )

            def _on_signal(signum: int, frame: FrameType | None) -> None:
                if worker.draining:
                    stop.set()  # a second signal: stop now
                worker.drain()

            signal.signal(signal.SIGTERM, _on_signal)
            signal.signal(signal.SIGINT, _on_signal)
            click.echo(
                f"worker {worker.worker_id} started (pool {pool}, concurrency {count})", err=True
            )
            stats = worker.run(stop.is_set)
            click.echo(
                f"worker {worker.worker_id} stopped: {stats.completed + stats.continued} "
                f"completed ({stats.continued} decided here), "
                f"{stats.rejected} refused, {stats.lost} lost",
                err=True,
            )
    finally:
        if exporter is not None:
            exporter.close()
        store.close()


@worker_group.command("drain")
@click.option("--pool", default=None, help="Only workers of this pool (default: all).")
@db_option
def worker_drain(*, pool: str | None, db: str) -> None:
    """Ask running workers to stop taking tasks, finish what they hold, and exit."""
    store = open_store(db)
    try:
        count = store.request_drain(pool)
    finally:
        store.close()
    click.echo(f"{count} worker(s) asked to drain")
