"""`noetl db init | migrate | status | prune | partitions`: create, upgrade and inspect
the database schema; delete the history of executions that finished long ago; make and
drop PostgreSQL's partitions of the event log.

The same `--db` / `NOETL_DB` (`db.url` in the configuration) as every other command: a
SQLite file or a PostgreSQL URL.
Stores also bring their schema up to date when they open; these commands are for doing
it on purpose (before a rollout, from a deploy job) and for seeing where a database is.
"""

from __future__ import annotations

import time

import click

from noetl.cli.settings import db_option, setting_option, with_settings
from noetl.config import Settings
from noetl.store import display_url, migrate_schema, open_store, schema_status
from noetl.store.migrate import Migration


@click.group("db")
def db_group() -> None:
    """The database schema: create it, upgrade it, show its version."""


def _labels(migrations: list[Migration]) -> str:
    return ", ".join(m.label for m in migrations)


@db_group.command("init")
@db_option
@with_settings
def db_init(*, settings: Settings) -> None:
    """Create the schema; a database that already has it is left as it is. A PostgreSQL
    database that does not exist yet is created first (it needs the CREATEDB right)."""
    db = settings.db.url
    where = display_url(db)
    if db.startswith(("postgresql://", "postgres://")):
        from noetl.store.pg_create import create_database_if_missing

        created = create_database_if_missing(db)
        if created:
            click.echo(f"created database {created}")
    applied = migrate_schema(db)
    if applied:
        click.echo(f"initialized {where}: applied {_labels(applied)}")
    else:
        version = schema_status(db).version
        click.echo(f"{where} is already initialized (schema version {version})")


@db_group.command("migrate")
@db_option
@with_settings
def db_migrate(*, settings: Settings) -> None:
    """Apply pending migrations, in one transaction, and print each one applied."""
    db = settings.db.url
    where = display_url(db)
    applied = migrate_schema(db)
    for migration in applied:
        click.echo(f"applied {migration.label}")
    version = schema_status(db).version if not applied else applied[-1].version
    click.echo(f"{where} is at schema version {version}")


@db_group.command("status")
@db_option
@with_settings
def db_status(*, settings: Settings) -> None:
    """Show the applied and the pending schema versions."""
    db = settings.db.url
    status = schema_status(db)
    applied = ", ".join(status.label(v) for v in status.applied) or "none"
    click.echo(f"database: {display_url(db)}")
    click.echo(f"applied:  {applied}")
    click.echo(f"pending:  {_labels(status.pending) or 'none'}")


@db_group.command("prune")
@setting_option(
    "retention.older_than",
    "--older-than",
    help="Prune executions that finished over this long ago: 30d, 12h, 90m.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@setting_option(
    "retention.batch",
    "--batch",
    type=click.IntRange(1, 100_000),
    help="Executions per transaction.",
)
@db_option
@with_settings
def db_prune(*, settings: Settings, dry_run: bool) -> None:
    """Delete the history of executions that FINISHED before the cutoff: their queue
    rows, inputs, events, step states, results and checkpoints, and their dead letters
    settled over dlq.retention_days ago. Each keeps a tombstone (id, playbook, status,
    times, when it was pruned). Running executions are never touched, nor is one with a
    pending dead letter (its replay needs the history) until an operator settles it."""
    from noetl.runtime.retention import RetentionPolicy

    policy = RetentionPolicy.of(settings)
    now = time.time()
    store = open_store(settings.db.url)
    try:
        report = policy.prune(store, now=now, dry_run=dry_run)
    finally:
        store.close()
    where = display_url(settings.db.url)
    if report.skipped:
        click.echo(f"{where}: another process is pruning this database; nothing done")
        return
    verb = "would delete" if dry_run else "deleted"
    cutoff = _when(now - policy.older_than_s)
    head = f"{report.executions} execution(s) that finished before {cutoff}"
    if dry_run:
        click.echo(f"{where}: dry run: would prune {head}")
    else:
        click.echo(f"{where}: pruned {head}, in {report.batches} batch(es)")
    for table, count in report.rows.items():
        click.echo(f"  {table:<16} {count:>10} row(s) {verb}")
    click.echo(f"  {'total':<16} {report.total:>10} row(s) {verb}")


@db_group.command("partitions")
@setting_option(
    "db.partition_days",
    "--days",
    type=click.IntRange(1, 366),
    help="The span of each partition made, in days.",
)
@db_option
@with_settings
def db_partitions(*, settings: Settings) -> None:
    """PostgreSQL: make the partitions of event_log and step_state for the next two spans
    of db.partition_days, and drop those whose executions are all pruned (what the
    server's partition job does every hour). SQLite keeps one table each: nothing to do."""
    from noetl.runtime.partitions import PartitionJob

    where = display_url(settings.db.url)
    if not settings.db.url.startswith(("postgresql://", "postgres://")):
        click.echo(f"{where}: not partitioned (PostgreSQL only); nothing to do")
        return
    store = open_store(settings.db.url)
    try:
        report = PartitionJob(store, period_days=settings.db.partition_days).run_once()
    finally:
        store.close()
    click.echo(f"{where}: made {len(report.made)}, dropped {len(report.dropped)} partition(s)")
    for name in report.made:
        click.echo(f"  made     {name}")
    for name in report.dropped:
        click.echo(f"  dropped  {name}")


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))
