"""The duckdb tool on real DuckDB files and data files in tmp_path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Outcome, Task
from noetl.tools.duckdb_tool import DuckdbTool
from noetl.worker.tools import ToolRegistry

EVIL = "x'); DROP TABLE t; --"


def make_task(spec: dict[str, Any], args: dict[str, Any] | None = None, **changes: Any) -> Task:
    fields: dict[str, Any] = {
        "task_id": "e.s",
        "execution_id": "e",
        "step": "s",
        "kind": "duckdb",
        "spec": spec,
        "args": args or {},
        "context": {},
        "key": "e:s",
    }
    fields.update(changes)
    return Task(**fields)


def run(
    query: str,
    args: dict[str, Any] | None = None,
    *,
    database: str | Path | None = None,
    tool: DuckdbTool | None = None,
    **changes: Any,
) -> Outcome:
    spec: dict[str, Any] = {"query": query}
    if database is not None:
        spec["database"] = str(database)
    return ToolRegistry([tool or DuckdbTool()]).run(make_task(spec, args, **changes))


def ok(outcome: Outcome) -> Any:
    assert outcome.ok, outcome.error
    return outcome.this


def test_a_database_file_keeps_what_a_task_wrote(tmp_path: Path) -> None:
    db = tmp_path / "warehouse.duckdb"
    created = ok(run("CREATE TABLE t (id INTEGER, name VARCHAR)", database=db))
    assert created == {"rows": [], "rowcount": 0, "columns": []}
    inserted = ok(
        run(
            "INSERT INTO t VALUES ($id, $name), ($id + 1, 'plain')",
            {"id": 1, "name": EVIL, "unused": "not a parameter"},
            database=db,
        )
    )
    assert inserted == {"rows": [], "rowcount": 2, "columns": []}

    selected = ok(run("SELECT id, name FROM t ORDER BY id", database=db))
    assert selected == {
        "rows": [{"id": 1, "name": EVIL}, {"id": 2, "name": "plain"}],
        "rowcount": 2,
        "columns": ["id", "name"],
    }
    updated = ok(run("UPDATE t SET name = upper(name) WHERE id = 2", database=db))
    assert updated["rowcount"] == 1
    returned = ok(run("DELETE FROM t WHERE id = 2 RETURNING id", database=db))
    assert returned == {"rows": [{"id": 2}], "rowcount": 1, "columns": ["id"]}


def test_memory_databases_last_one_task() -> None:
    assert ok(run("CREATE TABLE t (x INTEGER)"))["rowcount"] == 0
    gone = run("SELECT * FROM t")
    assert (gone.ok, gone.retryable) == (False, False)


def test_queries_over_csv_parquet_and_json_files(tmp_path: Path) -> None:
    csv = tmp_path / "people.csv"
    csv.write_text("id,name,joined\n1,ada,2024-01-02\n2,bob,2024-03-04\n", encoding="utf-8")
    people = ok(run("SELECT * FROM read_csv_auto($path) ORDER BY id", {"path": str(csv)}))
    assert people == {
        "rows": [
            {"id": 1, "name": "ada", "joined": "2024-01-02"},
            {"id": 2, "name": "bob", "joined": "2024-03-04"},
        ],
        "rowcount": 2,
        "columns": ["id", "name", "joined"],
    }

    parquet = tmp_path / "people.parquet"
    copied = ok(
        run(
            f"COPY (SELECT * FROM read_csv_auto('{csv}')) TO '{parquet}' (FORMAT parquet)",
        )
    )
    assert copied == {"rows": [], "rowcount": 2, "columns": []}
    assert parquet.exists()
    names = ok(run(f"SELECT name FROM read_parquet('{parquet}') WHERE id = $id", {"id": 2}))
    assert names["rows"] == [{"name": "bob"}]

    events = tmp_path / "events.json"
    events.write_text(
        json.dumps([{"kind": "a", "n": 1}, {"kind": "b", "n": 2}, {"kind": "a", "n": 5}]),
        encoding="utf-8",
    )
    totals = ok(
        run(f"SELECT kind, sum(n) AS total FROM read_json_auto('{events}') GROUP BY 1 ORDER BY 1")
    )
    assert totals["rows"] == [{"kind": "a", "total": 6}, {"kind": "b", "total": 2}]


def test_rows_in_args_are_tables_to_join() -> None:
    args = {
        "customers": [
            {"id": 1, "name": "ada", "address": {"city": "Paris"}},
            {"id": 2, "name": EVIL, "address": {"city": "Rome"}},
        ],
        "orders": [
            {"customer": 1, "amount": 10, "tags": ["new"]},
            {"customer": 1, "amount": 2.5, "note": None},
            {"customer": 2, "amount": 7, "mixed": "text"},
            {"customer": 3, "amount": 1, "mixed": 4},
        ],
        "min_total": 5,
        "empty": [],
    }
    query = """
        SELECT c.name, c.address.city AS city, sum(o.amount) AS total, count(o.tags) AS tagged
        FROM orders o JOIN customers c ON c.id = o.customer
        GROUP BY ALL HAVING sum(o.amount) >= $min_total ORDER BY total DESC
    """
    this = ok(run(query, args))
    assert this == {
        "rows": [
            {"name": "ada", "city": "Paris", "total": 12.5, "tagged": 1},
            {"name": EVIL, "city": "Rome", "total": 7.0, "tagged": 0},
        ],
        "rowcount": 2,
        "columns": ["name", "city", "total", "tagged"],
    }
    # a column of mixed types, or only nulls, is JSON: its values come back as they went in
    mixed = ok(run("SELECT mixed, note FROM orders ORDER BY customer, amount", args))
    assert [row["mixed"] for row in mixed["rows"]] == [None, None, "text", 4]
    assert {row["note"] for row in mixed["rows"]} == {None}


def test_args_tables_never_reach_a_database_file(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    ok(run("CREATE TABLE items AS SELECT 'stored' AS name", database=db))
    shadowed = ok(run("SELECT name FROM items", {"items": [{"name": "arg"}]}, database=db))
    assert shadowed["rows"] == [{"name": "arg"}]
    assert ok(run("SELECT name FROM items", database=db))["rows"] == [{"name": "stored"}]


def test_named_parameters(tmp_path: Path) -> None:
    this = ok(
        run(
            "SELECT $a + $b AS sum, $s AS s, $xs AS xs, $obj.k AS k, len($rows) AS n",
            {"a": 2, "b": 3.5, "s": EVIL, "xs": [1, 2], "obj": {"k": "v"}, "rows": [{"r": 1}]},
        )
    )
    assert this["rows"] == [{"sum": 5.5, "s": EVIL, "xs": [1, 2], "k": "v", "n": 1}]

    missing = run("SELECT $a, $b AS x, $c AS y", {"a": 1})
    assert (missing.ok, missing.retryable) == (False, False)
    assert missing.error == (
        "duckdb: args holds no value for the query's $b, $c "
        "(parameters are named: $name takes args.name)"
    )
    positional = run("SELECT ? AS x", {"a": 1})
    assert positional.error is not None
    assert "no value for the query's $1 " in positional.error


def test_values_come_back_as_json_data() -> None:
    this = ok(
        run(
            """SELECT 1.50::DECIMAL(5, 2) AS d, 3::DECIMAL(10, 0) AS i, DATE '2024-01-02' AS day,
                TIMESTAMP '2024-01-02 03:04:05' AS ts,
                UUID '12345678-1234-5678-1234-567812345678' AS u, 'ab'::BLOB AS b,
                INTERVAL 90 SECOND AS iv, [1, 2] AS l, {'k': [DATE '2024-01-01']} AS s,
                MAP {'a': 1} AS m, '{"x": [1, null]}'::JSON AS j, 'nan'::DOUBLE AS nan,
                170141183460469231731687303715884105727::HUGEINT AS h"""
        )
    )
    assert this["rows"] == [
        {
            "d": 1.5,
            "i": 3,
            "day": "2024-01-02",
            "ts": "2024-01-02T03:04:05",
            "u": "12345678-1234-5678-1234-567812345678",
            "b": "YWI=",
            "iv": 90.0,
            "l": [1, 2],
            "s": {"k": ["2024-01-01"]},
            "m": {"a": 1},
            "j": {"x": [1, None]},
            "nan": None,
            "h": 170141183460469231731687303715884105727,
        }
    ]
    json.dumps(this, allow_nan=False)


def test_errors_are_fatal() -> None:
    syntax = run("SELEC 1")
    assert (syntax.ok, syntax.retryable, syntax.error_type) == (False, False, "FatalError")
    assert syntax.error == 'duckdb: Parser Error: syntax error at or near "SELEC"'

    missing = run("SELECT * FROM no_such_table")
    assert (missing.ok, missing.retryable) == (False, False)
    assert missing.error is not None
    assert missing.error.startswith("duckdb: Catalog Error: Table with name no_such_table")

    no_file = run("SELECT * FROM read_csv_auto('/nonexistent/x.csv')")
    assert (no_file.ok, no_file.retryable) == (False, False)

    bad_spec = ToolRegistry([DuckdbTool()]).run(make_task({"sql": "SELECT 1"}))
    assert (bad_spec.ok, bad_spec.retryable) == (False, False)
    assert bad_spec.error is not None
    assert "invalid spec" in bad_spec.error


def test_one_statement_only(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    ok(run("CREATE TABLE t (x INTEGER)", database=db))
    several = run("SELECT 1; DROP TABLE t", database=db)
    assert (several.ok, several.retryable) == (False, False)
    assert several.error == "duckdb tool runs one statement; spec.query holds 2"
    assert ok(run("SELECT count(*) AS n FROM t", database=db))["rows"] == [{"n": 0}]
    assert run(" ; ").error == "duckdb tool runs one statement; spec.query holds 0"


def test_too_many_rows_is_fatal_and_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    tool = DuckdbTool(max_rows=3)
    ok(run("CREATE TABLE t (x INTEGER)", database=db, tool=tool))
    assert ok(run("SELECT * FROM range(3)", tool=tool))["rowcount"] == 3
    four = run("INSERT INTO t SELECT * FROM range(4) RETURNING x", database=db, tool=tool)
    assert (four.ok, four.retryable) == (False, False)
    assert four.error is not None
    assert "more than the 3 rows" in four.error
    assert ok(run("SELECT count(*) AS n FROM t", database=db))["rows"] == [{"n": 0}]


def test_a_query_past_its_timeout_is_interrupted() -> None:
    outcome = run("SELECT count(*) FROM range(1000000000000) a", timeout_ms=200)
    assert (outcome.ok, outcome.retryable) == (False, True)
    assert outcome.error_type == "TaskTimeoutError"
    assert outcome.duration_ms < 10_000
    assert ok(run("SELECT 1 AS one", timeout_ms=10_000))["rows"] == [{"one": 1}]


def test_a_database_file_another_process_holds_is_retryable(tmp_path: Path) -> None:
    db = tmp_path / "locked.duckdb"
    ok(run("CREATE TABLE t (x INTEGER)", database=db))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
            "sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        outcome = run("SELECT * FROM t", database=db)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        assert holder.stdout is not None
        holder.stdout.close()
    assert (outcome.ok, outcome.retryable) == (False, True)
    assert outcome.error_type == "RetryableError"
    assert outcome.error is not None
    assert "locked" in outcome.error
    assert ok(run("SELECT count(*) AS n FROM t", database=db))["rows"] == [{"n": 0}]


@pytest.mark.parametrize("rows", [[{}], [{"a": 1}, {"A": 2}]])
def test_rows_that_cannot_be_a_table_are_fatal(rows: list[dict[str, Any]]) -> None:
    outcome = run("SELECT 1 AS x", {"bad": rows})
    assert (outcome.ok, outcome.retryable) == (False, False)
    assert outcome.error is not None
    assert outcome.error.startswith("duckdb: args.bad ")
