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
@db_option
def server_start(*, host: str, port: int, pool: str, db: str) -> None:
    """Serve the API and orchestrate executions until SIGTERM / Ctrl-C."""
    serve(db, host=host, port=port, pool=pool, name="noetl server")


def serve(db: str, *, host: str, port: int, pool: str, name: str, note: str = "") -> None:
    """The API (and the console at /ui/) and the orchestrator loop over the database `db`,
    until SIGTERM / Ctrl-C; `note` is printed after the address."""
    import uvicorn

    from noetl.server.app import create_app

    _Server = _uvicorn_server()

    logging.basicConfig(
        level=os.environ.get("NOETL_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    store = open_store(db)
    owner = f"{socket.gethostname()}:{os.getpid()}"
    orchestrator = Orchestrator(store, owner=owner, pool=pool)
    app = create_app(store, orchestrator, version=__version__)
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
    click.echo(f"{name} {owner} listening on http://{host}:{port}{note}", err=True)
    try:
        server.run()  # returns on SIGTERM / SIGINT after finishing open requests
    finally:
        stop.set()
        loop.join(timeout=10)
        store.close()
        click.echo(f"{name} stopped", err=True)
