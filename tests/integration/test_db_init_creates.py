"""`noetl db init` on a PostgreSQL database that does not exist yet creates it, then its
schema; a second run leaves it as it is. The real CLI on the real PostgreSQL."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tests.conftest import pg_url
from tests.helpers.cli import noetl

pytestmark = pytest.mark.services


def test_db_init_creates_a_missing_database_then_leaves_it(pg_dsn: str) -> None:
    name = f"noetl_t_new_{uuid.uuid4().hex[:12]}"
    url = pg_url(pg_dsn, name)
    try:
        first = noetl("db", "init", "--db", url, clean_env=True)
        assert first.returncode == 0, first.stderr
        assert f"created database {name}" in first.stdout
        assert "applied 0001_init" in first.stdout
        again = noetl("db", "init", "--db", url, clean_env=True)
        assert again.returncode == 0, again.stderr
        assert "created database" not in again.stdout
        assert "is already initialized" in again.stdout
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            conn.execute(drop.format(sql.Identifier(name)))
