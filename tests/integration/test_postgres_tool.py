"""The postgres tool against a real PostgreSQL (a fresh database per test)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from noetl.core import Outcome, Task
from noetl.credentials.scope import EnvSecrets
from noetl.tools.postgres import PostgresTool
from noetl.worker.tools import ToolRegistry

CANARY = "pw-canary-77"
EVIL = "x'); DROP TABLE t; --"


def make_task(spec: dict[str, Any], args: dict[str, Any] | None = None, **changes: Any) -> Task:
    fields: dict[str, Any] = {
        "task_id": "e.s",
        "execution_id": "e",
        "step": "s",
        "kind": "postgres",
        "spec": spec,
        "args": args or {},
        "context": {},
        "key": "e:s",
    }
    fields.update(changes)
    return Task(**fields)


def run(dsn: str, query: str, args: dict[str, Any] | None = None, **changes: Any) -> Outcome:
    return ToolRegistry([PostgresTool()]).run(
        make_task({"query": query, "dsn": dsn}, args, **changes)
    )


def ok(outcome: Outcome) -> Any:
    assert outcome.ok, outcome.error
    return outcome.this


def with_password(dsn: str, password: str, *, port: int | None = None) -> str:
    parts = urlsplit(dsn)
    host = f"{parts.hostname}:{port or parts.port}"
    return parts._replace(netloc=f"{parts.username}:{password}@{host}").geturl()


def table_exists(dsn: str, name: str) -> bool:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
    return found is not None and found[0] is not None


def test_values_are_parameters_never_sql(pg_database: str) -> None:
    created = ok(run(pg_database, "CREATE TABLE t (id serial PRIMARY KEY, name text)"))
    assert created == {"rows": [], "rowcount": 0, "columns": []}

    inserted = ok(
        run(
            pg_database,
            "INSERT INTO t (name) VALUES (%(name)s), (%(other)s)",
            {"name": EVIL, "other": "plain", "unused": {"not": "sent"}},
        )
    )
    assert inserted == {"rows": [], "rowcount": 2, "columns": []}

    returned = ok(
        run(pg_database, "INSERT INTO t (name) VALUES (%(n)s) RETURNING id, name", {"n": "r"})
    )
    assert returned == {"rows": [{"id": 3, "name": "r"}], "rowcount": 1, "columns": ["id", "name"]}

    rows = ok(run(pg_database, "SELECT name FROM t WHERE name = %(name)s", {"name": EVIL}))
    assert rows["rows"] == [{"name": EVIL}]  # stored verbatim, and the table is still there
    assert table_exists(pg_database, "t")
    assert ok(run(pg_database, "SELECT count(*) AS n FROM t"))["rows"] == [{"n": 3}]


def test_rows_come_back_as_json_data(pg_database: str) -> None:
    ok(
        run(
            pg_database,
            """CREATE TABLE v (
                whole numeric, part numeric(10, 3), big bigint, ratio float8,
                at timestamptz, local timestamp, day date, id uuid, doc jsonb, raw json,
                blob bytea, span interval, tags text[], nothing text)""",
        )
    )
    ok(
        run(
            pg_database,
            """INSERT INTO v VALUES (%(whole)s, %(part)s, %(big)s, %(ratio)s, %(at)s,
                %(local)s, %(day)s, %(id)s, %(doc)s, %(raw)s, decode(%(blob)s, 'hex'),
                %(span)s, %(tags)s, %(nothing)s)""",
            {
                "whole": 12,
                "part": "1.250",
                "big": 2**62,
                "ratio": 0.5,
                "at": "2024-05-06T07:08:09+00:00",
                "local": "2024-05-06 07:08:09.5",
                "day": "2024-02-29",
                "id": "12345678-1234-5678-1234-567812345678",
                "doc": {"a": [1, {"b": None}], "s": EVIL},
                "raw": [{"k": 1}],
                "blob": "00ff",
                "span": "1 day 30 seconds",
                "tags": ["a", "b"],
                "nothing": None,
            },
        )
    )
    this = ok(run(pg_database, "SELECT *, whole / 4 AS quarter, 'NaN'::numeric AS nan FROM v"))
    assert this["columns"][:3] == ["whole", "part", "big"]
    assert this["rowcount"] == 1
    (row,) = this["rows"]
    at = row.pop("at")
    assert datetime.fromisoformat(at) == datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    assert row == {
        "whole": 12,
        "part": 1.25,
        "big": 2**62,
        "ratio": 0.5,
        "local": "2024-05-06T07:08:09.500000",
        "day": "2024-02-29",
        "id": "12345678-1234-5678-1234-567812345678",
        "doc": {"a": [1, {"b": None}], "s": EVIL},
        "raw": [{"k": 1}],
        "blob": "AP8=",
        "span": 86430.0,
        "tags": ["a", "b"],
        "nothing": None,
        "quarter": 3,
        "nan": None,
    }
    json.dumps(this, allow_nan=False)


def test_repeated_column_names_stay_apart(pg_database: str) -> None:
    this = ok(run(pg_database, "SELECT 1 AS id, 2 AS id, 3"))
    assert this == {
        "rows": [{"id": 1, "id_2": 2, "?column?": 3}],
        "rowcount": 1,
        "columns": ["id", "id_2", "?column?"],
    }


def test_a_syntax_error_is_fatal_and_names_the_sqlstate(pg_database: str) -> None:
    outcome = run(pg_database, "SELEC 1")
    assert not outcome.ok
    assert not outcome.retryable
    assert outcome.error_type == "FatalError"
    assert outcome.error == 'postgres: SQLSTATE 42601: syntax error at or near "SELEC"'

    missing = run(pg_database, "SELECT * FROM no_such_table")
    assert (missing.ok, missing.retryable) == (False, False)
    assert missing.error is not None
    assert "SQLSTATE 42P01" in missing.error
    assert 'relation "no_such_table" does not exist' in missing.error


def test_one_statement_only(pg_database: str) -> None:
    ok(run(pg_database, "CREATE TABLE t (x int)"))
    outcome = run(pg_database, "SELECT 1; DROP TABLE t")
    assert (outcome.ok, outcome.retryable) == (False, False)
    assert outcome.error is not None
    assert "SQLSTATE 42601" in outcome.error
    assert "multiple commands" in outcome.error
    assert table_exists(pg_database, "t")


def test_parameter_mistakes_are_fatal_with_a_hint(pg_database: str) -> None:
    missing = run(pg_database, "SELECT %(absent)s")
    assert (missing.ok, missing.retryable) == (False, False)
    assert missing.error == "postgres: query parameter missing: absent"

    percent = run(pg_database, "SELECT 'a%' AS x")
    assert not percent.ok
    assert percent.error is not None
    assert "write a literal % as %%" in percent.error
    assert ok(run(pg_database, "SELECT 'a%%' AS x"))["rows"] == [{"x": "a%"}]


@pytest.mark.parametrize(
    ("errcode", "sqlstate", "retryable"),
    [
        ("serialization_failure", "40001", True),
        ("deadlock_detected", "40P01", True),
        ("unique_violation", "23505", False),
    ],
)
def test_transient_server_errors_are_retryable(
    pg_database: str, errcode: str, sqlstate: str, retryable: bool
) -> None:
    query = f"DO $$BEGIN RAISE EXCEPTION 'it happened' USING ERRCODE = '{errcode}'; END$$"
    outcome = run(pg_database, query)
    assert not outcome.ok
    assert outcome.retryable is retryable
    assert outcome.error_type == ("RetryableError" if retryable else "FatalError")
    assert outcome.error == f"postgres: SQLSTATE {sqlstate}: it happened"


def test_a_statement_timeout_is_a_retryable_timeout(pg_database: str) -> None:
    outcome = run(pg_database, "SELECT pg_sleep(5)", timeout_ms=200)
    assert (outcome.ok, outcome.retryable) == (False, True)
    assert outcome.error_type == "TaskTimeoutError"
    assert outcome.error is not None
    assert "SQLSTATE 57014" in outcome.error
    assert outcome.duration_ms < 4000
    assert ok(run(pg_database, "SELECT pg_sleep(0.01) AS slept", timeout_ms=5000))["rowcount"] == 1


def test_too_many_rows_is_fatal_and_changes_nothing(pg_database: str) -> None:
    registry = ToolRegistry([PostgresTool(max_rows=5)])
    spec = {"dsn": pg_database}
    assert ok(registry.run(make_task({**spec, "query": "CREATE TABLE t (x int)"})))
    five = registry.run(make_task({**spec, "query": "SELECT generate_series(1, 5) AS x"}))
    assert ok(five)["rowcount"] == 5

    six = registry.run(
        make_task({**spec, "query": "INSERT INTO t SELECT generate_series(1, 6) RETURNING x"})
    )
    assert (six.ok, six.retryable) == (False, False)
    assert six.error is not None
    assert "returned 6 rows, more than the 5" in six.error
    counted = registry.run(make_task({**spec, "query": "SELECT count(*) AS n FROM t"}))
    assert ok(counted)["rows"] == [{"n": 0}]


def test_a_credential_names_the_database_and_its_password_is_masked(pg_database: str) -> None:
    dsn = with_password(pg_database, CANARY)  # trust auth: the password is never checked
    secrets = EnvSecrets({"NOETL_CREDENTIAL_wh": json.dumps({"dsn": dsn})})
    registry = ToolRegistry([PostgresTool()], secrets=secrets)
    task = make_task(
        {"query": "SELECT current_database() AS db, %(echo)s AS echo", "credential": "wh"},
        {"echo": f"the password is {CANARY}"},
    )
    this = ok(registry.run(task))
    assert this["rows"] == [{"db": urlsplit(pg_database).path[1:], "echo": "the password is ***"}]


def test_an_unknown_credential_is_fatal_and_named(pg_database: str) -> None:
    registry = ToolRegistry([PostgresTool()], secrets=EnvSecrets({}))
    outcome = registry.run(make_task({"query": "SELECT 1", "credential": "nope"}))
    assert (outcome.ok, outcome.retryable) == (False, False)
    assert outcome.error_type == "SecretError"
    assert outcome.error is not None
    assert "credential 'nope' is not configured" in outcome.error


def test_the_database_must_be_named_once() -> None:
    registry = ToolRegistry([PostgresTool()])
    neither = registry.run(make_task({"query": "SELECT 1"}))
    assert (neither.ok, neither.retryable) == (False, False)
    assert neither.error is not None
    assert "needs spec.credential" in neither.error
    both = registry.run(make_task({"query": "SELECT 1", "dsn": "x", "credential": "y"}))
    assert both.error == "postgres tool takes spec.credential or spec.dsn, not both"
    unknown = registry.run(make_task({"query": "SELECT 1", "dsn": "x", "table": "t"}))
    assert unknown.error is not None
    assert "spec.table" in unknown.error


def test_an_unreachable_database_is_retryable_and_never_shows_the_password(
    pg_dsn: str,
) -> None:
    dsn = with_password(pg_dsn, CANARY, port=1)
    for registry, spec in [
        (ToolRegistry([PostgresTool()]), {"dsn": dsn}),
        (
            ToolRegistry(
                [PostgresTool()],
                secrets=EnvSecrets({"NOETL_CREDENTIAL_wh": json.dumps({"dsn": dsn})}),
            ),
            {"credential": "wh"},
        ),
    ]:
        outcome = registry.run(make_task({"query": "SELECT 1", **spec}))
        assert (outcome.ok, outcome.retryable) == (False, True)
        assert outcome.error_type == "RetryableError"
        assert outcome.error is not None
        assert outcome.error.startswith("postgres: cannot connect to database ")
        assert "127.0.0.1:1" in outcome.error
        assert CANARY not in json.dumps(outcome.to_payload())


def test_a_dsn_that_cannot_be_parsed_is_fatal_and_not_repeated() -> None:
    dsn = f"postgresql://u:{CANARY}@[bad"
    outcome = ToolRegistry([PostgresTool()]).run(make_task({"query": "SELECT 1", "dsn": dsn}))
    assert (outcome.ok, outcome.retryable) == (False, False)
    assert outcome.error is not None
    assert "spec.dsn cannot be parsed" in outcome.error
    assert CANARY not in json.dumps(outcome.to_payload())
    # PostgresTool on its own, without the registry's masking, does not repeat it either
    alone = PostgresTool().run(make_task({"query": "SELECT 1", "dsn": dsn}))
    assert CANARY not in json.dumps(alone.to_payload())


def test_a_refused_login_is_fatal(pg_database: str) -> None:
    parts = urlsplit(pg_database)
    dsn = parts._replace(netloc=f"no_such_role_x:{CANARY}@{parts.hostname}:{parts.port}").geturl()
    outcome = ToolRegistry([PostgresTool()]).run(make_task({"query": "SELECT 1", "dsn": dsn}))
    assert (outcome.ok, outcome.retryable) == (False, False)
    assert outcome.error is not None
    assert 'role "no_such_role_x" does not exist' in outcome.error
    assert CANARY not in json.dumps(outcome.to_payload())
