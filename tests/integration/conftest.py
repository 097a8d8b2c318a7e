"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl.store import SqliteStore
from noetl.store.base import Store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store of each SQL kind: a SQLite file, and a fresh PostgreSQL database."""
    opened: Store
    if request.param == "sqlite":
        opened = SqliteStore(tmp_path / "noetl.db")
    else:
        from noetl.store.postgres import PostgresStore

        opened = PostgresStore(request.getfixturevalue("pg_database"))
    yield opened
    opened.close()
