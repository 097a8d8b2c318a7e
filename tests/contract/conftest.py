"""The `store` fixture: every Store adapter, for the one contract suite.

`postgres` runs on a fresh migrated database per test (`pg_database` in tests/conftest.py)
and is skipped without a reachable server, unless NOETL_TEST_REQUIRE_SERVICES=1.

`clock` is the clock the store judges leases by: a fake one for the embedded adapters
(`clock.advance` jumps), the real one for PostgreSQL, whose leases are timed by the
database's `now()` (`clock.advance` sleeps).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl.store import MemoryStore, PostgresStore, SqliteStore, Store
from tests.helpers.clock import FakeClock, RealClock, StoreClock


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def adapter(request: pytest.FixtureRequest) -> str:
    """The name of the Store adapter under test."""
    name: str = request.param
    return name


@pytest.fixture
def clock(adapter: str) -> StoreClock:
    return RealClock() if adapter == "postgres" else FakeClock()


@pytest.fixture
def store(
    adapter: str, clock: StoreClock, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Store]:
    store: Store
    if adapter == "memory":
        store = MemoryStore(clock=clock)
    elif adapter == "sqlite":
        store = SqliteStore(tmp_path / "store" / "noetl.db", clock=clock)
    else:
        store = PostgresStore(request.getfixturevalue("pg_database"))
    yield store
    store.close()
