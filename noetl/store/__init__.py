"""Persistence: one Store protocol, adapters for memory, SQLite and PostgreSQL.

The PostgreSQL adapter (psycopg and its pool) is imported only when a PostgreSQL URL is
opened, so commands that never touch it start fast.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noetl.errors import ConfigError
from noetl.store.base import (
    Append,
    ConcurrencyError,
    ExecutionRecord,
    NotFoundError,
    Store,
    StoreUnavailableError,
)
from noetl.store.migrate import Migration, SchemaStatus, discover, status_sqlite
from noetl.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from noetl.store.memory import MemoryStore
    from noetl.store.postgres import PostgresStore

__all__ = [
    "Append",
    "ConcurrencyError",
    "ExecutionRecord",
    "MemoryStore",
    "NotFoundError",
    "PostgresStore",
    "SqliteStore",
    "Store",
    "StoreUnavailableError",
    "display_url",
    "migrate_schema",
    "open_store",
    "schema_status",
    "sqlite_file",
]

_EXPECTED = "expected memory://, sqlite:///path/to/noetl.db or a file path"
_NO_SCHEMA = "memory:// keeps no schema: there is nothing to create or migrate"


# psycopg and its pool take a quarter of a second to import: only PostgreSQL URLs pay it.
# The memory store (tests, `memory://`) loads when it is used too.
def __getattr__(name: str) -> Any:
    if name == "PostgresStore":
        from noetl.store.postgres import PostgresStore  # noqa: PLC0415 - lazy, see above

        return PostgresStore
    if name == "MemoryStore":
        from noetl.store.memory import MemoryStore  # noqa: PLC0415 - lazy, see above

        return MemoryStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _locate(url: str) -> tuple[str, str]:
    """(`memory` | `sqlite` | `postgres`, what to open: "" / a path / the DSN as given).

    The rest of a URL is never echoed in errors: it may carry a password."""
    text = url.strip()
    if not text:
        raise ConfigError(f"the store URL is empty; {_EXPECTED}")
    scheme, sep, rest = text.partition("://")
    if not sep:
        return "sqlite", text
    scheme = scheme.lower()
    if scheme == "memory":
        return "memory", ""
    if scheme == "sqlite":
        if not rest:
            raise ConfigError(f"the store URL {text!r} names no file; {_EXPECTED}")
        # sqlite:////abs.db (SQLAlchemy's spelling) means the same file as sqlite:///abs.db.
        if rest.startswith("//"):
            rest = "/" + rest.lstrip("/")
        return "sqlite", rest
    if scheme in ("postgresql", "postgres"):
        return "postgres", text
    raise ConfigError(f"unknown store URL scheme {scheme!r}; {_EXPECTED}")


def open_store(url: str, *, connections: int | None = None) -> Store:
    """Open the store a URL names: `memory://`, `sqlite:///abs/path.db`, a file path, or
    `postgresql://user:password@host:port/database` (also `postgres://`).

    `connections`: the most database connections the store may hold at once (PostgreSQL;
    default 10), to match the threads that use it.

    `sqlite://` is followed by the path as is, so `sqlite:///abs.db` is absolute and
    `sqlite://rel.db` is relative to the working directory. Raises ConfigError for
    anything else, StoreUnavailableError when the database cannot be used.
    """
    kind, where = _locate(url)
    if kind == "memory":
        from noetl.store.memory import MemoryStore  # noqa: PLC0415 - lazy, see above

        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(Path(where))
    from noetl.store import postgres  # noqa: PLC0415 - lazy, see __getattr__

    if connections is None:
        return postgres.PostgresStore(where)
    return postgres.PostgresStore(where, max_size=max(connections, 2))


def sqlite_file(url: str) -> str | None:
    """The file a SQLite store URL (or plain path) names; None for other stores."""
    kind, target = _locate(url)
    return target if kind == "sqlite" else None


def display_url(url: str) -> str:
    """The store URL as it may be shown: a PostgreSQL DSN loses its password."""
    kind, where = _locate(url)
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return str(Path(where).expanduser().absolute())
    from noetl.store import postgres  # noqa: PLC0415 - lazy, see __getattr__

    return postgres.parse_dsn(where)[1].url()


def schema_status(url: str) -> SchemaStatus:
    """Applied and pending schema versions of the database `url` names; changes nothing
    (a missing SQLite file is reported as empty, not created)."""
    kind, where = _locate(url)
    if kind == "memory":
        raise ConfigError(_NO_SCHEMA)
    if kind == "postgres":
        from noetl.store import postgres  # noqa: PLC0415 - lazy, see __getattr__

        return postgres.schema_status(where)
    path = Path(where).expanduser().absolute()
    if not path.exists():
        known = discover("sqlite")
        return SchemaStatus([], known, known)
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            return status_sqlite(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreUnavailableError(f"SQLite database {path} cannot be read ({exc})") from exc


def migrate_schema(url: str) -> list[Migration]:
    """Create or upgrade the schema of the database `url` names; the migrations applied
    (empty when it was up to date). Safe to run from several processes at once."""
    kind, where = _locate(url)
    if kind == "memory":
        raise ConfigError(_NO_SCHEMA)
    if kind == "postgres":
        from noetl.store import postgres  # noqa: PLC0415 - lazy, see __getattr__

        return postgres.migrate_schema(where)
    pending = schema_status(url).pending
    # Opening the store applies what is pending, with its readable errors.
    SqliteStore(Path(where)).close()
    return pending
