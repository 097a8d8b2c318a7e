"""The `store` fixture: every Store adapter, for the one contract suite.

`postgres` runs on a fresh migrated database per test (`pg_database` in tests/conftest.py)
and is skipped without a reachable server, unless NOETL_TEST_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl.store import MemoryStore, PostgresStore, SqliteStore, Store


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    adapter: Store
    if request.param == "memory":
        adapter = MemoryStore()
    elif request.param == "sqlite":
        adapter = SqliteStore(tmp_path / "store" / "noetl.db")
    else:
        adapter = PostgresStore(request.getfixturevalue("pg_database"))
    yield adapter
    adapter.close()
