"""`noetl ui`: the operator console over a database, usually the SQLite file of `noetl run`.

It serves the same app as `noetl server start` (the API, the console at /ui/, and an
orchestrator loop) on another default port. Executions started from the console are
queued like on a server: a worker over the same file runs them
(`noetl worker start --db PATH`); the console shows whether one is alive.
"""

from __future__ import annotations

import os

import click

from noetl.cli.observe import log_options, metrics_options
from noetl.cli.serve import auth_option, scheduler_option, serve
from noetl.cli.settings import db_option, setting_option, with_settings
from noetl.config import Settings
from noetl.store import display_url, sqlite_file


@click.command("ui")
@setting_option("ui.host", "--host", help="Address to listen on.")
@setting_option(
    "ui.port", "--port", type=click.IntRange(1, 65535), help="Port of the console and the API."
)
@setting_option(
    "server.pool",
    "--pool",
    help="Pool executions started from the console are queued in (unset: worker.pool).",
    default_text="worker.pool",
)
@auth_option
@scheduler_option
@log_options("INFO")
@metrics_options(port=False, path=True)
@db_option
@with_settings
def ui_cmd(*, settings: Settings) -> None:
    """Open the operator console over a database (default: the one `noetl run` writes).

    Browse executions, their graphs and events, dead letters and playbooks at
    http://HOST:PORT/ui/. Executions started or replayed from the console need a worker
    over the same database: `noetl worker start --db PATH`. The console asks for an API
    token (`noetl auth token create --role admin --db PATH`) unless --no-auth."""
    db = settings.db.url
    path = sqlite_file(db)
    if path is not None and not os.path.exists(path):
        click.echo(
            f"note: {path} does not exist yet; it is created empty, and executions appear "
            "as `noetl run --db` writes them",
            err=True,
        )
    host, port = settings.ui.host, settings.ui.port
    # The URL is shown masked: a PostgreSQL URL may carry a password.
    shown = display_url(db)
    note = (
        f"\n  console: http://{host}:{port}/ui/  (database {shown})"
        f"\n  executions started from the console run on a worker: "
        f"noetl worker start --db {shown}"
    )
    if settings.auth.enabled:
        note += (
            "\n  the console asks for an API token: "
            f"noetl auth token create --role admin --db {shown}"
        )
    serve(settings, host=host, port=port, name="noetl ui", note=note)
