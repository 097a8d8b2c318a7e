"""The duckdb tool: one query on a DuckDB database per task, over files, tables and args.

What runs, from the task's `spec` (`DuckdbSpec`) and `args`:

* `spec.database`: `:memory:` (the default; a fresh database per task, gone when the task
  ends) or the path of a database file (`~` expanded, relative paths from the worker's
  working directory, missing directories made), opened for the task and closed after it.
* `spec.query`: ONE statement, taken literally (never rendered as a template). Files are
  read with DuckDB's own functions: `read_csv_auto('x.csv')`, `read_parquet('x.parquet')`,
  `read_json_auto('x.json')`; `COPY ... TO` writes them.
* `args`: every arg whose value is a non-empty list of dicts (rows) becomes a temporary table
  named by its key, loaded through DuckDB's JSON reader (column types inferred from the
  values; a column whose values mix types, or are all null, is JSON). Temporary tables are
  never written to a database file, and one shadows a table of the same name. The query's
  `$name` parameters take their values from the args of those names (a rows arg too, as a
  list of structs); an arg the query does not name is not a parameter. An empty list is no
  table: it has no columns.
* `spec.command` instead holds several statements (a string, or a list), run in order;
  each takes the `$name` parameters it names. The result keeps each statement's
  (`command_0`, `command_1`, ... and the last one's `rows` at the top), as the postgres
  tool's does.
* The statements and the table loads run in one transaction, committed when the result is
  complete: a failed task changes nothing in a database file.
* The task's deadline (`timeout_ms`, noetl.tools.deadline) interrupts the query when it
  passes (a retryable `TaskTimeoutError`).

The result (`this`) is as for the postgres tool: `{"rows": [...], "rowcount": n,
"columns": [...]}` for a statement that returns rows (JSON columns are parsed, every value
JSON-safe: `noetl.tools.jsonsafe`), `{"rows": [], "rowcount": n, "columns": []}` for one
that does not (n the rows inserted, updated, deleted or copied; 0 when it does not say).
More than `MAX_ROWS` (100,000) rows is a fatal error.

Failures are fatal (`FatalError`), except a database file another process holds locked and
a write-write conflict between transactions (`RetryableError`), and the timeout.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
from pydantic import ValidationError

from noetl.core import Outcome, Task
from noetl.dsl.kinds import DuckdbSpec
from noetl.errors import FatalError, NoetlError, RetryableError, TaskTimeoutError
from noetl.tools._outcome import outcome_of
from noetl.tools.deadline import Deadline
from noetl.tools.jsonsafe import MAX_ROWS, command_result, commands_result, query_result

__all__ = ["DuckdbTool"]

# What DuckDB answers for a statement that returns no rows of its own.
_STATUS_COLUMNS = (["Count"], ["Success"])


class DuckdbTool:
    """Runs `spec.query` on `spec.database` (see the module docstring)."""

    kind: str = "duckdb"

    def __init__(self, *, max_rows: int = MAX_ROWS) -> None:
        self.max_rows = max_rows

    def run(self, task: Task) -> Outcome:
        return outcome_of(task, self._run)

    def _run(self, task: Task) -> dict[str, Any]:
        spec = _spec(task.spec)
        if spec.command is not None:
            statements = _statements(spec.command)
        else:
            assert spec.query is not None  # the spec has one of the two
            statements = [_statement(spec.query)]
        params = [_params(statement, task.args) for statement in statements]
        tables = {name: value for name, value in task.args.items() if _is_rows(value)}
        try:
            con = duckdb.connect(_database_path(spec.database))
        except duckdb.Error as exc:
            raise _error(exc, timed_out=False, timeout_ms=None) from None
        watchdog = _Watchdog(con, Deadline.of(task))
        try:
            con.begin()
            for name, rows in tables.items():
                _load_table(con, name, rows)
            results = [
                self._execute(con, statement, statement, values)
                for statement, values in zip(statements, params, strict=True)
            ]
            result = commands_result(results) if spec.command is not None else results[0]
            con.commit()
            return result
        except duckdb.Error as exc:
            raise _error(exc, timed_out=watchdog.fired, timeout_ms=task.timeout_ms) from None
        finally:
            watchdog.cancel()
            con.close()  # without a commit, this rolls back

    def _execute(
        self,
        con: duckdb.DuckDBPyConnection,
        query: str | duckdb.Statement,
        statement: duckdb.Statement,
        params: dict[str, Any],
    ) -> dict[str, Any]:
        cur = con.execute(query, params)
        description = cur.description
        names = [str(column[0]) for column in description or ()]
        if description is None or (
            statement.type != duckdb.StatementType.SELECT and names in _STATUS_COLUMNS
        ):
            status = cur.fetchall()
            count = status[0][0] if names == ["Count"] and status else 0
            return command_result(count if isinstance(count, int) else 0)
        rows = cur.fetchmany(self.max_rows + 1)
        if len(rows) > self.max_rows:
            raise FatalError(
                f"duckdb: the query returned more than the {self.max_rows} rows a task may "
                "return; add a LIMIT, aggregate, or write the rows out with COPY ... TO"
            )
        json_columns = [i for i, column in enumerate(description) if str(column[1]) == "JSON"]
        if json_columns:
            rows = [_parse_json(row, json_columns) for row in rows]
        return query_result(names, rows)


class _Watchdog:
    """Interrupts the connection's query when the task's time runs out."""

    def __init__(self, con: duckdb.DuckDBPyConnection, deadline: Deadline | None) -> None:
        self.fired = False
        self._con = con
        self._lock = threading.Lock()
        self._done = False
        self._timer: threading.Timer | None = None
        if deadline is not None:
            self._timer = threading.Timer(deadline.remaining(), self._interrupt)
            self._timer.daemon = True
            self._timer.start()

    def _interrupt(self) -> None:
        with self._lock:  # never once the connection may be closing
            if not self._done:
                self.fired = True
                self._con.interrupt()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            with self._lock:
                self._done = True


def _spec(spec: Mapping[str, Any]) -> DuckdbSpec:
    try:
        return DuckdbSpec.model_validate(spec)
    except ValidationError as exc:
        problems = "; ".join(
            f"spec.{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
            if error["loc"]
            else f"spec: {error['msg']}"
            for error in exc.errors()
        )
        raise FatalError(f"duckdb tool: invalid spec: {problems}") from None


def _statement(query: str) -> duckdb.Statement:
    """The one statement of `query`; FatalError for none, several, or a syntax error."""
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise FatalError(f"duckdb: {_reason(exc)}") from None
    if len(statements) != 1:
        raise FatalError(f"duckdb tool runs one statement; spec.query holds {len(statements)}")
    return statements[0]


def _statements(command: str | list[str]) -> list[duckdb.Statement]:
    """The statements of a `command`, in order; FatalError for a syntax error."""
    texts = [command] if isinstance(command, str) else command
    found: list[duckdb.Statement] = []
    try:
        for text in texts:
            found.extend(duckdb.extract_statements(text))
    except duckdb.Error as exc:
        raise FatalError(f"duckdb: {_reason(exc)}") from None
    return found


def _params(statement: duckdb.Statement, args: Mapping[str, Any]) -> dict[str, Any]:
    """The values of the query's `$name` parameters (DuckDB refuses values it was not asked
    for, so only those)."""
    missing = sorted(name for name in statement.named_parameters if name not in args)
    if missing:
        names = ", ".join(f"${name}" for name in missing)
        raise FatalError(
            f"duckdb: args holds no value for the query's {names} "
            "(parameters are named: $name takes args.name)"
        )
    return {name: args[name] for name in statement.named_parameters}


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _database_path(database: str) -> str:
    """The path to open; a database file's missing directories are made (an upstream
    NoETL playbook's default, one file per execution, lives under `.noetl/duckdb/`)."""
    path = str(Path(database).expanduser()) if database.startswith("~") else database
    if path != ":memory:" and not path.startswith(":memory:"):
        parent = Path(path).parent
        if not parent.exists():
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise FatalError(f"duckdb: cannot make the directory of {path!r}: {exc}") from None
    return path


def _load_table(con: duckdb.DuckDBPyConnection, name: str, rows: list[Any]) -> None:
    """`rows` as the temporary table `name`, through DuckDB's JSON reader: it infers the
    column types (nested dicts become structs, lists lists) without pandas or pyarrow."""
    text = json.dumps(rows)
    try:
        found = con.execute("SELECT json_structure(?::JSON)", [text]).fetchone()
        structure = json.loads(found[0]) if found else None
        if not (isinstance(structure, list) and structure and isinstance(structure[0], dict)):
            raise FatalError(f"duckdb: args.{name} has no fields to make columns of")
        con.execute(
            f"CREATE TEMP TABLE {_identifier(name)} AS "
            "SELECT unnest(from_json(?::JSON, ?), max_depth := 2)",
            [text, json.dumps(_no_null_types(structure))],
        )
    except (duckdb.InterruptException, duckdb.IOException):
        raise
    except duckdb.Error as exc:
        raise FatalError(f"duckdb: args.{name} cannot be a table: {_reason(exc)}") from None


def _no_null_types(structure: Any) -> Any:
    """A JSON structure with the NULL type (a field only ever null) made JSON: a column
    of type NULL cannot be compared or cast."""
    if structure == "NULL":
        return "JSON"
    if isinstance(structure, dict):
        return {key: _no_null_types(value) for key, value in structure.items()}
    if isinstance(structure, list):
        return [_no_null_types(value) for value in structure]
    return structure


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _parse_json(row: tuple[Any, ...], columns: list[int]) -> tuple[Any, ...]:
    values = list(row)
    for i in columns:
        if isinstance(values[i], str):
            values[i] = json.loads(values[i])
    return tuple(values)


def _reason(exc: BaseException) -> str:
    """The first paragraph of a DuckDB message, on one line (the rest is a LINE pointer)."""
    text = str(exc).strip().split("\n\n", 1)[0]
    return " ".join(text.split()) or type(exc).__name__


def _error(exc: duckdb.Error, *, timed_out: bool, timeout_ms: int | None) -> NoetlError:
    reason = _reason(exc)
    if timed_out:
        return TaskTimeoutError(f"duckdb: the query ran past its timeout_ms ({timeout_ms})")
    lowered = reason.lower()
    if isinstance(exc, duckdb.IOException) and "lock" in lowered:
        return RetryableError(f"duckdb: the database file is locked: {reason}")
    if isinstance(exc, duckdb.TransactionException) and "conflict" in lowered:
        return RetryableError(f"duckdb: {reason}")
    return FatalError(f"duckdb: {reason}")
