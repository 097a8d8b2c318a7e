"""Shared test fixtures."""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from noetl.store import display_url
from noetl.store.migrate import discover, migrate_postgres
from tests.helpers.flaky_http import Flaky

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def flaky() -> Iterator[Flaky]:
    """A loopback HTTP server that answers 503 `failures` times, then 200 `{"call": n,
    "state": "pending"}` `pending` times, then `{"call": n, "state": "done"}`."""
    server = Flaky()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def write_playbook(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write playbook text to a file and return its path."""

    def _write(text: str, name: str = "playbook.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return _write


# --- PostgreSQL ---------------------------------------------------------------------------
# Tests that need PostgreSQL ask for `pg_database` (a fresh, migrated database of their
# own) or `pg_empty_database` (a fresh database without any table). Each is a copy of a
# template (`CREATE DATABASE ... TEMPLATE`, procrastinate's trick), which is faster than
# migrating every time. The migrated template is built once and reused for as long as
# the migrations do not change (its name carries their hash), so test sessions running
# at once share it safely instead of rebuilding it under each other.
# Without a reachable server these tests are skipped, or fail under
# NOETL_TEST_REQUIRE_SERVICES=1 (CI), so a missing service is never a silent pass.

PG_DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
PG_TEMPLATE_PREFIX = "noetl_test_template"
PG_FIXTURES = frozenset(
    {"pg_dsn", "pg_template", "pg_databases", "pg_database", "pg_empty_database"}
)
NATS_FIXTURES = frozenset({"nats_url", "nats_bucket"})
# pg_advisory_lock key that serializes building the template across test sessions.
_PG_TEMPLATE_LOCK = 0x6E6F65746C2D7470


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses a PostgreSQL or NATS fixture carries the `services` marker,
    so `-m "not services"` leaves them out."""
    for item in items:
        if (PG_FIXTURES | NATS_FIXTURES).intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.services)


def services_missing(reason: str) -> NoReturn:
    """Skip, or fail when NOETL_TEST_REQUIRE_SERVICES=1 says the services must be there."""
    if os.environ.get("NOETL_TEST_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (NOETL_TEST_REQUIRE_SERVICES=1)", pytrace=False)
    pytest.skip(reason)


def pg_url(dsn: str, dbname: str) -> str:
    """`dsn` (a postgresql:// URL) pointing at another database."""
    return urlsplit(dsn)._replace(path="/" + dbname).geturl()


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """A reachable PostgreSQL server: NOETL_TEST_PG_DSN, by default the local one."""
    dsn = os.environ.get("NOETL_TEST_PG_DSN", PG_DEFAULT_DSN)
    if not dsn.startswith(("postgresql://", "postgres://")):
        pytest.fail("NOETL_TEST_PG_DSN must be a postgresql:// URL", pytrace=False)
    shown = display_url(dsn)
    try:
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split())
        services_missing(
            f"PostgreSQL at {shown} is not reachable ({reason}); set NOETL_TEST_PG_DSN"
        )
    return dsn


@pytest.fixture(scope="session")
def pg_template(pg_dsn: str) -> str:
    """The name of a database with every migration applied, to copy per test."""
    digest = hashlib.sha256()
    for migration in discover("postgres"):
        digest.update(f"{migration.label}\n{migration.sql}\n".encode())
    name = f"{PG_TEMPLATE_PREFIX}_{digest.hexdigest()[:12]}"
    ident = sql.Identifier(name)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        # Sessions running at once build it once; the others wait, then reuse it.
        admin.execute("SELECT pg_advisory_lock(%s)", (_PG_TEMPLATE_LOCK,))
        done = admin.execute(
            "SELECT datistemplate FROM pg_database WHERE datname = %s", (name,)
        ).fetchone()
        if done is None or not done[0]:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
            admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(ident))
            with psycopg.connect(pg_url(pg_dsn, name), autocommit=True) as conn:
                migrate_postgres(conn)
            # Marked last: a database marked as a template is complete.
            admin.execute(sql.SQL("ALTER DATABASE {} IS_TEMPLATE true").format(ident))
        admin.execute("SELECT pg_advisory_unlock(%s)", (_PG_TEMPLATE_LOCK,))
    return name


class PgDatabases:
    """Creates databases from a template a little ahead of need and drops used ones in
    the background: on a slow disk each CREATE or DROP DATABASE takes 0.1-0.5 s, which
    the tests would otherwise wait for one by one."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._jobs = ThreadPoolExecutor(max_workers=2, thread_name_prefix="noetl-test-db")
        self._ahead: dict[str, deque[Future[str]]] = {}
        self._drops: list[Future[None]] = []

    def _run(self, statement: sql.Composed) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(statement)

    def _create(self, template: str) -> str:
        name = f"noetl_t_{uuid.uuid4().hex[:16]}"
        create = sql.SQL("CREATE DATABASE {} TEMPLATE {}")
        self._run(create.format(sql.Identifier(name), sql.Identifier(template)))
        return name

    def take(self, template: str, *, ahead: int = 0) -> str:
        """A new database copied from `template` (its name); `ahead` more are started."""
        queue = self._ahead.setdefault(template, deque())
        while len(queue) <= ahead:
            queue.append(self._jobs.submit(self._create, template))
        return queue.popleft().result()

    def drop(self, name: str) -> None:
        # FORCE: a store a failed test did not close must not keep the database alive.
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        self._drops.append(self._jobs.submit(self._run, drop))

    def close(self) -> None:
        for queue in self._ahead.values():
            for made in queue:
                self.drop(made.result())
        for dropped in self._drops:
            dropped.result()
        self._jobs.shutdown()


@pytest.fixture(scope="session")
def pg_databases(pg_dsn: str) -> Iterator[PgDatabases]:
    databases = PgDatabases(pg_dsn)
    yield databases
    databases.close()


@pytest.fixture
def pg_database(pg_databases: PgDatabases, pg_template: str) -> Iterator[str]:
    """The URL of a fresh migrated database of this test's own; dropped afterwards."""
    name = pg_databases.take(pg_template, ahead=1)
    yield pg_url(pg_databases.dsn, name)
    pg_databases.drop(name)


@pytest.fixture
def pg_empty_database(pg_databases: PgDatabases) -> Iterator[str]:
    """The URL of a fresh database without any table; dropped afterwards."""
    name = pg_databases.take("template0")
    yield pg_url(pg_databases.dsn, name)
    pg_databases.drop(name)


# --- NATS ---------------------------------------------------------------------------------
# Tests that need NATS JetStream ask for `nats_url` (a reachable server) or `nats_bucket`
# (a K/V bucket name of their own, deleted afterwards). Skipped without the server, or
# failed under NOETL_TEST_REQUIRE_SERVICES=1.

NATS_DEFAULT_URL = "nats://127.0.0.1:4222"


@pytest.fixture(scope="session")
def nats_url() -> str:
    """A reachable NATS server with JetStream: NOETL_TEST_NATS_URL, by default the local one."""
    from tests.helpers.nats import jetstream_reason

    url = os.environ.get("NOETL_TEST_NATS_URL", NATS_DEFAULT_URL)
    reason = jetstream_reason(url)
    if reason is not None:
        services_missing(
            f"NATS JetStream at {url} is not usable ({reason}); set NOETL_TEST_NATS_URL"
        )
    return url


@pytest.fixture
def nats_bucket(nats_url: str) -> Iterator[str]:
    """A K/V bucket name unique to this test; the bucket is deleted afterwards."""
    from tests.helpers.nats import delete_bucket

    name = f"noetl_test_{uuid.uuid4().hex[:12]}"
    yield name
    delete_bucket(nats_url, name)
