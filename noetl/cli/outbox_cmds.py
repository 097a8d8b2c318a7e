"""`noetl outbox init` and `noetl outbox relay`.

The relay works on PostgreSQL only: it claims rows with FOR UPDATE SKIP LOCKED so that
several relays can share a table. NATS is imported when a command runs.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import click

from noetl.errors import ConfigError

DEFAULT_NATS = "nats://127.0.0.1:4222"


def _postgres_url(url: str) -> str:
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            "the outbox relay needs PostgreSQL (--db postgresql://...): it claims rows "
            "with FOR UPDATE SKIP LOCKED, which SQLite has not"
        )
    return url


db_opt = click.option(
    "--db", "db", envvar="NOETL_OUTBOX_DB", required=True, help="PostgreSQL URL of the outbox."
)
table_opt = click.option(
    "--table",
    envvar="NOETL_OUTBOX_TABLE",
    default="outbox",
    show_default=True,
    help="The outbox table ([schema.]table).",
)


@click.group("outbox")
def outbox_group() -> None:
    """The outbox relay: publish the rows of an outbox table (PostgreSQL) to NATS JetStream."""


@outbox_group.command("init")
@db_opt
@table_opt
def init_cmd(db: str, table: str) -> None:
    """Create the outbox table (and its index of pending rows) if it does not exist."""
    import psycopg

    from noetl.outbox import create_table_sql

    statement = create_table_sql(table)
    try:
        with psycopg.connect(_postgres_url(db), autocommit=True) as conn:
            conn.execute(statement)
    except psycopg.OperationalError as exc:
        raise ConfigError(f"cannot open the outbox database: {exc}") from None
    click.echo(f"outbox table {table} ready")


@outbox_group.command("relay")
@db_opt
@click.option(
    "--nats",
    "nats_url",
    envvar="NOETL_OUTBOX_NATS",
    default=DEFAULT_NATS,
    show_default=True,
    help="NATS server URL.",
)
@table_opt
@click.option(
    "--subject-prefix",
    envvar="NOETL_OUTBOX_SUBJECT_PREFIX",
    default="outbox",
    show_default=True,
    help="A row is published to PREFIX.<its subject column>.",
)
@click.option(
    "--stream",
    envvar="NOETL_OUTBOX_STREAM",
    default="OUTBOX",
    show_default=True,
    help="The JetStream stream (created over PREFIX.> when missing).",
)
@click.option(
    "--duplicate-window",
    envvar="NOETL_OUTBOX_DUPLICATE_WINDOW",
    type=click.FloatRange(1, 86400),
    default=600.0,
    show_default=True,
    help="Seconds JetStream deduplicates by Nats-Msg-Id (for a stream the relay creates).",
)
@click.option(
    "--batch",
    envvar="NOETL_OUTBOX_BATCH",
    type=click.IntRange(1, 10000),
    default=100,
    show_default=True,
    help="Rows claimed per pass.",
)
@click.option(
    "--max-attempts",
    envvar="NOETL_OUTBOX_MAX_ATTEMPTS",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="Failed publishes after which a row is dead (status 'dead').",
)
@click.option(
    "--poll",
    "poll_s",
    envvar="NOETL_OUTBOX_POLL",
    type=click.FloatRange(0, 60, min_open=True),
    default=1.0,
    show_default=True,
    help="Seconds between passes when nothing is due.",
)
@click.option(
    "--backoff",
    "backoff_s",
    envvar="NOETL_OUTBOX_BACKOFF",
    type=click.FloatRange(0, 3600),
    default=1.0,
    show_default=True,
    help="Seconds before the first retry of a failed row "
    "(doubling, with jitter, up to --backoff-max).",
)
@click.option(
    "--backoff-max",
    "backoff_max_s",
    envvar="NOETL_OUTBOX_BACKOFF_MAX",
    type=click.FloatRange(0, 86400),
    default=300.0,
    show_default=True,
    help="Longest wait before a retry, in seconds.",
)
@click.option(
    "--create-table/--no-create-table",
    envvar="NOETL_OUTBOX_CREATE_TABLE",
    default=False,
    show_default=True,
    help="Create the outbox table when it does not exist.",
)
@click.option(
    "--metrics-port",
    envvar="NOETL_OUTBOX_METRICS_PORT",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics.",
)
@click.option(
    "--metrics-host",
    envvar="NOETL_OUTBOX_METRICS_HOST",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics exporter listens on.",
)
@click.option(
    "--once",
    envvar="NOETL_OUTBOX_ONCE",
    is_flag=True,
    help="Stop when no row is due instead of polling.",
)
@click.option(
    "--log-level",
    envvar="NOETL_LOG_LEVEL",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.option(
    "--log-format",
    envvar="NOETL_LOG_FORMAT",
    default="text",
    show_default=True,
    type=click.Choice(["json", "text"]),
    help="json: one JSON object per line (for log shippers); text: for terminals.",
)
@click.option("--pause-after-publish", type=float, default=0.0, hidden=True)
def relay_cmd(**opts: Any) -> None:
    """Publish pending outbox rows to NATS JetStream until stopped (SIGTERM/SIGINT end
    the current pass, then exit)."""
    from noetl.observability.logging import configure_logging
    from noetl.outbox import OutboxMetrics, RelayConfig

    _postgres_url(opts["db"])
    configure_logging(opts["log_level"].upper(), opts["log_format"])
    config = RelayConfig(
        table=opts["table"],
        subject_prefix=opts["subject_prefix"],
        batch=opts["batch"],
        max_attempts=opts["max_attempts"],
        poll_s=opts["poll_s"],
        backoff_initial_s=opts["backoff_s"],
        backoff_max_s=opts["backoff_max_s"],
        pause_after_publish_s=opts["pause_after_publish"],
    )
    metrics = OutboxMetrics()
    exporter = None
    if opts["metrics_port"] is not None:
        from noetl.observability.exporter import start_exporter

        exporter = start_exporter(metrics.registry, opts["metrics_port"], opts["metrics_host"])
        click.echo(f"metrics on {exporter.url}", err=True)
    try:
        total = asyncio.run(_relay(opts, config, metrics))
    finally:
        if exporter is not None:
            exporter.close()
    click.echo(f"relayed {total} row(s)", err=True)


async def _relay(opts: dict[str, Any], config: Any, metrics: Any) -> int:
    import psycopg

    from noetl.outbox.jetstream import JetStreamPublisher, connect, ensure_stream
    from noetl.outbox.service import serve

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    url = _postgres_url(opts["db"])

    async def connect_db() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)

    nc = await connect(opts["nats_url"])
    try:
        subjects = [f"{config.subject_prefix}.>"] if config.subject_prefix else [">"]
        if await ensure_stream(nc, opts["stream"], subjects, opts["duplicate_window"]):
            click.echo(f"created stream {opts['stream']} over {subjects[0]}", err=True)
        click.echo(f"relaying {config.table} to {opts['stream']}", err=True)
        return await serve(
            connect_db,
            JetStreamPublisher(nc),
            config,
            metrics,
            stopping,
            once=opts["once"],
            create_table=opts["create_table"],
        )
    finally:
        await nc.close()
