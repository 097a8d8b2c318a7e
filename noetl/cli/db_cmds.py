"""`noetl db init | migrate | status`: create, upgrade and inspect the database schema.

The same `--db` / `NOETL_DB` (`db.url` in the configuration) as every other command: a
SQLite file or a PostgreSQL URL.
Stores also bring their schema up to date when they open; these commands are for doing
it on purpose (before a rollout, from a deploy job) and for seeing where a database is.
"""

from __future__ import annotations

import click

from noetl.cli.settings import db_option, with_settings
from noetl.config import Settings
from noetl.store import display_url, migrate_schema, schema_status
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
