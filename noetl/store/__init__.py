"""Persistence: one Store protocol, adapters for memory, SQLite (and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

from noetl.errors import ConfigError
from noetl.store.base import (
    Append,
    ConcurrencyError,
    ExecutionRecord,
    NotFoundError,
    Store,
    StoreUnavailableError,
)
from noetl.store.memory import MemoryStore
from noetl.store.sqlite import SqliteStore

__all__ = [
    "Append",
    "ConcurrencyError",
    "ExecutionRecord",
    "MemoryStore",
    "NotFoundError",
    "SqliteStore",
    "Store",
    "StoreUnavailableError",
    "open_store",
]

_EXPECTED = "expected memory://, sqlite:///path/to/noetl.db or a file path"


def open_store(url: str) -> Store:
    """Open the store a URL names: `memory://`, `sqlite:///abs/path.db` or a file path.

    `sqlite://` is followed by the path as is, so `sqlite:///abs.db` is absolute and
    `sqlite://rel.db` is relative to the working directory. Raises ConfigError for
    anything else.
    """
    text = url.strip()
    if not text:
        raise ConfigError(f"the store URL is empty; {_EXPECTED}")
    scheme, sep, rest = text.partition("://")
    if not sep:
        return SqliteStore(Path(text))
    scheme = scheme.lower()
    if scheme == "memory":
        return MemoryStore()
    if scheme == "sqlite":
        if not rest:
            raise ConfigError(f"the store URL {text!r} names no file; {_EXPECTED}")
        # sqlite:////abs.db (SQLAlchemy's spelling) means the same file as sqlite:///abs.db.
        if rest.startswith("//"):
            rest = "/" + rest.lstrip("/")
        return SqliteStore(Path(rest))
    # The rest of the URL is not echoed: it may carry a password.
    if scheme in ("postgresql", "postgres"):
        raise ConfigError(
            "PostgreSQL stores are not supported yet by this build of noetl; "
            "use sqlite:///path/to/noetl.db (or a file path) for now"
        )
    raise ConfigError(f"unknown store URL scheme {scheme!r}; {_EXPECTED}")
