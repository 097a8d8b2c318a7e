"""The postgres tool: one parameterized query against PostgreSQL per task.

What runs, from the task's `spec` (`PostgresSpec`) and `args`:

* The database: `spec.credential` names a credential of the worker (an upstream
  `{type: postgres, data: {db_host, db_port, db_user, db_password, db_name}}` record, or a
  map with a `dsn`; see `noetl.credentials.records`), or `spec.dsn` gives the DSN itself;
  exactly one of the two. The password is masked in the outcome either way
  (`SecretScope.remember`).
* `spec.query` is ONE statement, taken literally (never rendered as a template). Its values
  come from `args` as psycopg named parameters, `%(name)s`: they travel apart from the SQL,
  so no value can change the statement. Since the query always goes through parameter
  substitution, a literal `%` is written `%%` (`LIKE 'a%%'`). A dict arg (or a list holding
  dicts) is sent as jsonb; a list of scalars as an array. Several statements are refused
  by the server: the query is sent as a prepared statement, which holds one.
* `spec.command` instead holds several statements (a string, or a list of statements),
  run in order as one simple query: PostgreSQL splits them. With args their values are
  bound by psycopg on the client, quoted (`%(name)s` as for a query). The result keeps
  each statement's: `{"command_0": {...}, "command_1": {...}, ...}` (each as a query's
  result, with upstream's `row_count` and `status`), and the last statement's `rows`,
  `rowcount` and `columns` at the top with `statement_count`.
* The statements run in a transaction of their own, committed when the result is complete:
  a failed task (an error, too many rows) changes nothing. Statements PostgreSQL refuses
  inside a transaction block (VACUUM, CREATE DATABASE, ... CONCURRENTLY) cannot be run.
* What is left of `task.timeout_ms` (its `Deadline`, noetl.tools.deadline) when the
  transaction starts becomes its `statement_timeout`.

Connections are short-lived: one `psycopg.connect` per task (`connect_timeout` 10 s unless
the DSN sets one), closed when the task ends. A task costs a connection set-up (a few ms on
a local network), but no pool can hand a task a broken connection or session state left by
another task (SET, temporary tables, an aborted transaction), and a rotated credential is
used by the next task without any cache to flush.

The result (`this`) for a statement that returns rows (SELECT, ... RETURNING) is
`{"rows": [{column: value}], "rowcount": n, "columns": [names]}` with JSON-safe values
(`noetl.tools.jsonsafe`); for any other `{"rows": [], "rowcount": n, "columns": []}` (n the
rows the statement changed, 0 when it does not say). More than `MAX_ROWS` (100,000) rows is
a fatal error: add a LIMIT or page through the table with a loop.

Failures: connection errors, serialization failures (40001), deadlocks (40P01), lock
timeouts (55P03), too many connections (53300) and server shutdowns (57P01-57P03) are
retryable (`RetryableError`); a statement timeout (57014) is a retryable
`TaskTimeoutError`; a login the server refuses (unknown role or database, bad password)
and every other error are fatal (`FatalError`; `SecretError` for an unknown credential).
Messages name the SQLSTATE and the first line of the server's message, and the database
as host, port, name and user: never the DSN.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import conninfo as pg_conninfo
from psycopg.types.json import Jsonb
from pydantic import ValidationError

from noetl.core import Outcome, Task
from noetl.credentials.records import postgres_conninfo
from noetl.credentials.scope import current_scope
from noetl.dsl.kinds import PostgresSpec
from noetl.errors import FatalError, NoetlError, RetryableError, TaskTimeoutError
from noetl.tools._outcome import outcome_of
from noetl.tools.deadline import Deadline
from noetl.tools.jsonsafe import MAX_ROWS, command_result, commands_result, query_result

__all__ = ["CONNECT_TIMEOUT_S", "PostgresTool"]

CONNECT_TIMEOUT_S = 10
_RETRYABLE_SQLSTATES = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available
        "53300",  # too_many_connections
        "57P01",  # admin_shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now
    }
)
_EMPTY_QUERY = 0  # libpq's PGRES_EMPTY_QUERY: a command of comments only
_TIMEOUT_SQLSTATE = "57014"  # query_canceled: statement_timeout ran out
# A login the server refused: another attempt is refused the same way.
_LOGIN_REFUSED = ("authentication failed", "does not exist", "pg_hba.conf", "password")


@dataclass(frozen=True, slots=True)
class _Database:
    """A DSN ready to connect with, and what may be said about it in a message."""

    conninfo: str
    host: str
    port: str
    dbname: str
    user: str
    password: str | None

    def __str__(self) -> str:
        return f"database {self.dbname!r} at {self.host}:{self.port} as {self.user!r}"

    def scrub(self, text: str) -> str:
        if self.password:
            text = text.replace(self.password, "***")
        return text


class PostgresTool:
    """Runs `spec.query` with `args` as its parameters (see the module docstring)."""

    kind: str = "postgres"

    def __init__(self, *, max_rows: int = MAX_ROWS) -> None:
        self.max_rows = max_rows

    def run(self, task: Task) -> Outcome:
        return outcome_of(task, self._run)

    def _run(self, task: Task) -> dict[str, Any]:
        spec = _spec(task.spec)
        database = _database(spec)
        params = {name: _param(value) for name, value in task.args.items()}
        try:
            conn = psycopg.connect(database.conninfo)
        except psycopg.Error as exc:
            raise _connect_error(exc, database) from None
        deadline = Deadline.of(task)
        left_ms = None if deadline is None else deadline.remaining_ms()
        try:
            with conn:  # commits when the block completes, else rolls back; then closes
                if spec.command is not None:
                    return self._commands(conn, spec.command, params, left_ms)
                assert spec.query is not None  # the spec has one of the two
                return self._execute(conn, spec.query, params, left_ms)
        except psycopg.Error as exc:
            raise _query_error(exc, database, task.timeout_ms) from None

    def _execute(
        self,
        conn: psycopg.Connection[Any],
        query: str,
        params: dict[str, Any],
        timeout_ms: int | None,
    ) -> dict[str, Any]:
        cur = conn.cursor()
        if timeout_ms:
            cur.execute("SELECT set_config('statement_timeout', %s, true)", (str(int(timeout_ms)),))
        # prepare=True: a prepared statement holds one statement, so "a; b" is refused
        # (psycopg would otherwise send a query without parameters as a simple query,
        # which runs any number of statements).
        cur.execute(query, params, prepare=True)
        if cur.description is None:
            return command_result(cur.rowcount)
        if cur.rowcount > self.max_rows:
            raise FatalError(
                f"postgres: the query returned {cur.rowcount} rows, more than the "
                f"{self.max_rows} a task may return; add a LIMIT or read the table in pages"
            )
        return query_result([column.name for column in cur.description], cur.fetchall())

    def _commands(
        self,
        conn: psycopg.Connection[Any],
        command: str | list[str],
        params: dict[str, Any],
        timeout_ms: int | None,
    ) -> dict[str, Any]:
        """Several statements, in order, in the task's one transaction. Sent as one
        simple query, so PostgreSQL itself splits them (dollar quotes and all); with
        args, psycopg binds the values client-side, quoted, before sending."""
        sql = command if isinstance(command, str) else ";\n".join(c.rstrip("; \n") for c in command)
        if timeout_ms:
            conn.execute(
                "SELECT set_config('statement_timeout', %s, true)", (str(int(timeout_ms)),)
            )
        cur: psycopg.Cursor[Any] = psycopg.ClientCursor(conn) if params else conn.cursor()
        cur.execute(sql, params or None)
        results: list[dict[str, Any]] = []
        while True:
            if cur.pgresult is not None and cur.pgresult.status != _EMPTY_QUERY:
                results.append(self._statement_result(cur, len(results)))
            if not cur.nextset():
                return commands_result(results)

    def _statement_result(self, cur: psycopg.Cursor[Any], index: int) -> dict[str, Any]:
        if cur.description is None:
            return command_result(cur.rowcount)
        if cur.rowcount > self.max_rows:
            raise FatalError(
                f"postgres: statement {index} of the command returned {cur.rowcount} rows, "
                f"more than the {self.max_rows} a task may return; add a LIMIT"
            )
        return query_result([column.name for column in cur.description], cur.fetchall())


def _spec(spec: Mapping[str, Any]) -> PostgresSpec:
    try:
        return PostgresSpec.model_validate(spec)
    except ValidationError as exc:
        # msg only: an input value may be a resolved secret
        problems = "; ".join(
            f"spec.{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            if error["loc"]
            else f"spec: {error['msg']}"
            for error in exc.errors()
        )
        raise FatalError(f"postgres tool: invalid spec: {problems}") from None


def _database(spec: PostgresSpec) -> _Database:
    """Where the query runs: the credential's DSN or the inline one, its password
    remembered for masking."""
    scope = current_scope()
    if spec.credential is not None and spec.dsn is not None:
        raise FatalError("postgres tool takes spec.credential or spec.dsn, not both")
    if spec.credential is not None:
        dsn = postgres_conninfo(scope.record(spec.credential))
        scope.remember(dsn)
        origin = f"the connection of credential {spec.credential!r}"
    elif spec.dsn:
        dsn = spec.dsn
        scope.remember(dsn)
        origin = "spec.dsn"
    else:
        raise FatalError(
            "postgres tool needs spec.credential (a credential configured on the worker) "
            "or spec.dsn"
        )
    try:
        params: dict[str, Any] = pg_conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        # not the parser's message: it quotes the DSN, password and all
        raise FatalError(
            f"postgres: {origin} cannot be parsed; expected "
            "postgresql://user:password@host:5432/database or key=value pairs"
        ) from None
    password = params.get("password")
    if password:
        scope.remember(str(password))
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    params.setdefault("application_name", "noetl")
    env = os.environ  # libpq's own fallbacks, for the message only
    user = str(params.get("user") or env.get("PGUSER") or getpass.getuser())
    return _Database(
        conninfo=pg_conninfo.make_conninfo(**params),
        host=str(params.get("host") or params.get("hostaddr") or env.get("PGHOST") or "localhost"),
        port=str(params.get("port") or env.get("PGPORT") or "5432"),
        dbname=str(params.get("dbname") or env.get("PGDATABASE") or user),
        user=user,
        password=str(password) if password else None,
    )


def _param(value: Any) -> Any:
    """An arg as a query parameter: dicts (and lists holding them) as jsonb."""
    if isinstance(value, dict) or (isinstance(value, list) and _holds_dict(value)):
        return Jsonb(value)
    return value


def _holds_dict(items: list[Any]) -> bool:
    return any(isinstance(v, dict) or (isinstance(v, list) and _holds_dict(v)) for v in items)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _connect_error(exc: psycopg.Error, database: _Database) -> NoetlError:
    reason = database.scrub(_first_line(str(exc))) or type(exc).__name__
    message = f"postgres: cannot connect to {database}: {reason}"
    if any(mark in reason.lower() for mark in _LOGIN_REFUSED):
        return FatalError(message)
    return RetryableError(message)


def _query_error(exc: psycopg.Error, database: _Database, timeout_ms: int | None) -> NoetlError:
    sqlstate = exc.sqlstate
    primary = exc.diag.message_primary if sqlstate else None
    reason = database.scrub(primary or _first_line(str(exc))) or type(exc).__name__
    if sqlstate is None:
        if isinstance(exc, psycopg.OperationalError):  # the connection broke mid-query
            return RetryableError(f"postgres: lost the connection to {database}: {reason}")
        if isinstance(exc, psycopg.ProgrammingError) and "placeholder" in reason:
            reason += " (query parameters are %(name)s; write a literal % as %%)"
        return FatalError(f"postgres: {reason}")
    message = f"postgres: SQLSTATE {sqlstate}: {reason}"
    if sqlstate == _TIMEOUT_SQLSTATE:
        budget = f" (timeout_ms {timeout_ms})" if timeout_ms else ""
        return TaskTimeoutError(message + budget)
    if sqlstate in _RETRYABLE_SQLSTATES or sqlstate.startswith("08"):
        return RetryableError(message)
    return FatalError(message)
