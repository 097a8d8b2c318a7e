"""`noetl server start`: the REST API and the orchestrator loop in one process."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from types import FrameType

import click

from noetl import __version__
from noetl.cli.observe import log_options, metrics_options, new_metrics, setup_logging
from noetl.cli.run_cmd import db_option
from noetl.runtime.orchestrator import Orchestrator
from noetl.store import open_store

log = logging.getLogger("noetl.server")


def _uvicorn_server() -> type:
    import uvicorn

    class _NoSignals(uvicorn.Server):
        """uvicorn re-raises the signal it caught once it has shut down, which would end
        the process before the orchestrator stops and the store closes; we handle
        SIGTERM/SIGINT ourselves instead."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return _NoSignals


@click.command("start")
@click.option("--host", default="127.0.0.1", envvar="NOETL_SERVER_HOST", show_default=True)
@click.option("--port", type=int, default=8083, envvar="NOETL_SERVER_PORT", show_default=True)
@click.option(
    "--pool",
    default="default",
    envvar="NOETL_WORKER_POOL",
    show_default=True,
    help="Pool new tasks are queued in.",
)
@log_options("INFO")
@metrics_options(port=False, path=True)
@db_option
def server_start(
    *,
    host: str,
    port: int,
    pool: str,
    log_level: str,
    log_format: str,
    metrics_enabled: bool,
    metrics_path: str,
    db: str,
) -> None:
    """Serve the API and orchestrate executions until SIGTERM / Ctrl-C."""
    import uvicorn

    from noetl.observability import observer_for
    from noetl.server.app import create_app

    _Server = _uvicorn_server()

    setup_logging(log_level, log_format)
    store = open_store(db)
    owner = f"{socket.gethostname()}:{os.getpid()}"
    metrics = new_metrics(store) if metrics_enabled else None
    orchestrator = Orchestrator(
        store, owner=owner, pool=pool, observer=observer_for(metrics=metrics, pool=pool)
    )
    app = create_app(
        store, orchestrator, version=__version__, metrics=metrics, metrics_path=metrics_path
    )
    stop = threading.Event()
    loop = threading.Thread(
        target=orchestrator.serve, args=(stop.is_set,), name="noetl-orchestrator", daemon=True
    )
    loop.start()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
    server = _Server(config)

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        if server.should_exit:
            server.force_exit = True  # a second signal: do not wait for open requests
        server.should_exit = True

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    click.echo(f"noetl server {owner} listening on http://{host}:{port}", err=True)
    try:
        server.run()  # returns on SIGTERM / SIGINT after finishing open requests
    finally:
        stop.set()
        loop.join(timeout=10)
        store.close()
        click.echo("noetl server stopped", err=True)
