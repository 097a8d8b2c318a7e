"""Numbered schema migrations: `migrations/<dialect>/NNNN_name.sql`, applied in order.

`schema_migrations(version, applied_at)` records what a database already has. Pending
migrations are applied in one transaction, so an upgrade happens completely or not at all,
and a second process migrating the same database waits for the first instead of applying
the same migration twice (SQLite: the write lock of `BEGIN IMMEDIATE`; PostgreSQL: a
transaction-level advisory lock).
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from noetl.store.base import StoreUnavailableError

if TYPE_CHECKING:
    import psycopg

# pg_advisory_xact_lock key that serializes migrations of one PostgreSQL database
# (the bytes of "noetl-mg"); the playbook catalog locks in the two-key space instead.
POSTGRES_MIGRATION_LOCK = 0x6E6F65746C2D6D67

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        """`0002_queue`, as the file is named."""
        return f"{self.version:04d}_{self.name}"


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    """What a database has (`applied` versions) and what this build would add."""

    applied: list[int]
    pending: list[Migration]
    known: list[Migration] = field(default_factory=list)  # every migration of the dialect

    @property
    def version(self) -> int:
        """The schema version: the newest applied migration (0 for an empty database)."""
        return max(self.applied, default=0)

    def label(self, version: int) -> str:
        """`0002_queue` for a known version, `0002` for one this build does not know."""
        for migration in self.known:
            if migration.version == version:
                return migration.label
        return f"{version:04d}"


def discover(dialect: str) -> list[Migration]:
    """The packaged migrations of one dialect, ordered by version."""
    folder = resources.files("noetl.store").joinpath("migrations", dialect)
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match is None:
            continue
        found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions in {dialect}: {versions}")
    return found


def split_statements(sql: str) -> list[str]:
    """Split a script into complete statements (semicolons in strings and triggers kept)."""
    statements: list[str] = []
    buffer = ""
    for piece in sql.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if _strip_comments(buffer).strip(" \t\r\n;"):
                statements.append(buffer.strip())
            buffer = ""
    if _strip_comments(buffer).strip(" \t\r\n;"):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {buffer!r}")
    return statements


def _strip_comments(sql: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines())


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


def status_sqlite(conn: sqlite3.Connection) -> SchemaStatus:
    """Applied and pending versions of a SQLite database, changing nothing."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    applied = applied_versions(conn) if exists else set()
    known = discover("sqlite")
    return SchemaStatus(sorted(applied), _pending(applied, known), known)


def migrate_sqlite(
    conn: sqlite3.Connection,
    migrations: Sequence[Migration] | None = None,
    *,
    clock: Callable[[], float] = time.time,
) -> list[int]:
    """Apply pending migrations; return the versions applied (empty when up to date).

    `conn` must be in autocommit mode (`isolation_level=None`): this function controls
    the transaction itself.
    """
    todo = list(discover("sqlite") if migrations is None else migrations)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    if not _pending(applied_versions(conn), todo):
        return []
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Re-read under the write lock: another process may have migrated meanwhile.
        pending = _pending(applied_versions(conn), todo)
        for migration in pending:
            for statement in split_statements(migration.sql):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                (migration.version, clock()),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return [m.version for m in pending]


def _postgres_applied(conn: psycopg.Connection[Any]) -> set[int]:
    row = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return set()
    return {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}


def status_postgres(conn: psycopg.Connection[Any]) -> SchemaStatus:
    """Applied and pending versions of a PostgreSQL database, changing nothing."""
    applied = _postgres_applied(conn)
    known = discover("postgres")
    return SchemaStatus(sorted(applied), _pending(applied, known), known)


def migrate_postgres(
    conn: psycopg.Connection[Any], migrations: Sequence[Migration] | None = None
) -> list[int]:
    """Apply pending migrations in one transaction; return the versions applied.

    `conn` must be in autocommit mode. The tables go to the first schema of the
    connection's search_path. Concurrent callers serialize on an advisory lock, and the
    one that waited finds nothing left to do.
    """
    todo = list(discover("postgres") if migrations is None else migrations)
    if not _pending(_postgres_applied(conn), todo):
        return []  # the common case (every start of a store): no lock taken
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (POSTGRES_MIGRATION_LOCK,))
        schema = conn.execute("SELECT current_schema()").fetchone()
        if schema is None or schema[0] is None:
            raise StoreUnavailableError(
                "no schema of the search_path exists in this database; create it "
                "(CREATE SCHEMA ...) or fix the search_path given in the DSN options"
            )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations "
            "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        # Re-read under the lock: another process may have migrated meanwhile.
        pending = _pending(_postgres_applied(conn), todo)
        for migration in pending:
            conn.execute(migration.sql.encode("utf-8"))  # a script: several statements
            conn.execute(
                "INSERT INTO schema_migrations (version) VALUES (%s)", (migration.version,)
            )
    return [m.version for m in pending]


def _pending(applied: set[int], migrations: Sequence[Migration]) -> list[Migration]:
    newest = max((m.version for m in migrations), default=0)
    unknown = sorted(v for v in applied if v > newest)
    if unknown:
        raise SchemaTooNewError(unknown[-1], newest)
    return [m for m in migrations if m.version not in applied]


class SchemaTooNewError(StoreUnavailableError):
    """The database was migrated by a newer NoETL than this one."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"database schema version {found} is newer than this build knows ({known}); "
            "upgrade noetl or use another database"
        )
