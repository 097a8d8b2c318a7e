"""A PostgreSQL database and its schema, for `noetl db`: created when it does not exist
yet (`noetl db init`), migrated, its schema version read.

The server is asked through its maintenance database (`postgres`) with the same user, host
and port; creating needs the CREATEDB right. A database that exists is left alone."""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noetl.core import StoreUnavailableError
from noetl.store._pg_connector import connect
from noetl.store.migrate import (
    Migration,
    SchemaStatus,
    discover,
    migrate_postgres,
    status_postgres,
)

__all__ = ["create_database_if_missing", "migrate_schema", "schema_status"]

MAINTENANCE_DB = "postgres"


def create_database_if_missing(dsn: str) -> str | None:
    """Create the database `dsn` names when it does not exist; its name when it was
    created, None when it existed. StoreUnavailableError when it cannot be created."""
    params = conninfo_to_dict(dsn)
    name = params.get("dbname")
    if not name or name == MAINTENANCE_DB:
        return None
    try:
        psycopg.connect(dsn, connect_timeout=10).close()
        return None
    except psycopg.OperationalError as exc:
        if "does not exist" not in str(exc):
            return None  # not a missing database: the store says what it is
    admin = make_conninfo(dsn, dbname=MAINTENANCE_DB)
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(name))))
    except psycopg.errors.DuplicateDatabase:
        return None  # created meanwhile by another process
    except psycopg.Error as exc:
        raise StoreUnavailableError(
            f"database {name!r} does not exist and could not be created through "
            f"{MAINTENANCE_DB!r} ({type(exc).__name__}: {str(exc).strip().splitlines()[0]}): "
            "create it (createdb) or grant CREATEDB"
        ) from None
    return str(name)


def schema_status(dsn: str) -> SchemaStatus:
    """Applied and pending schema versions of a PostgreSQL database; changes nothing."""
    conn, target = connect(dsn)
    try:
        with conn:
            return status_postgres(conn)
    except psycopg.OperationalError as exc:
        raise target.unavailable(exc) from None


def migrate_schema(dsn: str) -> list[Migration]:
    """Apply pending migrations to a PostgreSQL database; the migrations applied."""
    conn, target = connect(dsn)
    try:
        with conn:
            applied = set(migrate_postgres(conn))
    except psycopg.OperationalError as exc:
        raise target.unavailable(exc) from None
    except StoreUnavailableError as exc:
        raise StoreUnavailableError(f"{target}: {exc}", retryable=exc.retryable) from exc
    return [m for m in discover("postgres") if m.version in applied]
