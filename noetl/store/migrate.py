"""Numbered schema migrations: `migrations/<dialect>/NNNN_name.sql`, applied in order.

`schema_migrations(version, applied_at)` records what a database already has. Pending
migrations are applied in one transaction, so an upgrade happens completely or not at all,
and a second process opening the same new file waits for the first instead of applying
the same migration twice.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources

from noetl.store.base import StoreUnavailableError

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


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
            "upgrade noetl or use another database file"
        )
