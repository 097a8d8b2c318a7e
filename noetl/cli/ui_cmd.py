"""`noetl ui`: the operator console over a database, usually the SQLite file of `noetl run`.

It serves the same app as `noetl server start` (the API, the console at /ui/, and an
orchestrator loop) on another default port. Executions started from the console are
queued like on a server: a worker over the same file runs them
(`noetl worker start --db PATH`); the console shows whether one is alive.
"""

from __future__ import annotations

import os

import click

from noetl.cli.run_cmd import db_option
from noetl.cli.serve import serve
from noetl.store import display_url, sqlite_file


@click.command("ui")
@click.option(
    "--host",
    default="127.0.0.1",
    envvar="NOETL_UI_HOST",
    show_envvar=True,
    show_default=True,
    help="Address to listen on.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8084,
    envvar="NOETL_UI_PORT",
    show_envvar=True,
    show_default=True,
    help="Port of the console and the API.",
)
@click.option(
    "--pool",
    default="default",
    envvar="NOETL_WORKER_POOL",
    show_default=True,
    help="Pool executions started from the console are queued in.",
)
@db_option
def ui_cmd(*, host: str, port: int, pool: str, db: str) -> None:
    """Open the operator console over a database (default: the one `noetl run` writes).

    Browse executions, their graphs and events, dead letters and playbooks at
    http://HOST:PORT/ui/. Executions started or replayed from the console need a worker
    over the same database: `noetl worker start --db PATH`."""
    path = sqlite_file(db)
    if path is not None and not os.path.exists(path):
        click.echo(
            f"note: {path} does not exist yet; it is created empty, and executions appear "
            "as `noetl run --db` writes them",
            err=True,
        )
    # The URL is shown masked: a PostgreSQL URL may carry a password.
    shown = display_url(db)
    note = (
        f"\n  console: http://{host}:{port}/ui/  (database {shown})"
        f"\n  executions started from the console run on a worker: "
        f"noetl worker start --db {shown}"
    )
    serve(db, host=host, port=port, pool=pool, name="noetl ui", note=note)
