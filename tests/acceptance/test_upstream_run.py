"""Upstream NoETL playbooks through the real CLI: `noetl lint`, `validate` and `run`.

The playbooks are small ones written here in upstream's dialect; they run against a real
SQLite file, a real PostgreSQL, DuckDB files and an HTTP server on loopback.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from tests.helpers.cli import noetl


def write(tmp_path: Path, body: str, name: str = "upstream.yaml") -> Path:
    head = (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: sample\n  path: tests/sample\n"
    )
    path = tmp_path / name
    path.write_text(head + textwrap.dedent(body), encoding="utf-8")
    return path


def run(
    tmp_path: Path, playbook: Path, *extra: str, env: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run a playbook (from `tmp_path`); its summary and each step's result."""
    db = tmp_path / "noetl.db"
    proc = noetl("run", str(playbook), "--json", "--db", str(db), *extra, cwd=tmp_path, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    summary = json.loads(proc.stdout)
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT step, payload FROM event_log WHERE type = 'step.finished' ORDER BY seq"
        ).fetchall()
    results = {step: json.loads(payload).get("result") for step, payload in rows}
    return summary, results


# --- lint and validate ---------------------------------------------------------------------


def test_lint_names_the_dialect_and_validate_passes(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        workload:
          message: hi
        workflow:
          - step: start
            tool:
              kind: python
              input:
                message: "{{ message }}"
              code: |
                result = {"echo": message}
        """,
    )
    lint = noetl("lint", "--strict", str(path))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert (
        "info I001: read as upstream NoETL dialect (first sign: 'input' under tool)" in lint.stdout
    )
    assert "0 error(s), 0 warning(s); all valid" in lint.stdout
    validate = noetl("validate", str(path))
    assert validate.returncode == 0
    assert "I001" not in validate.stdout + validate.stderr


def test_validate_reports_what_remains_unsupported_as_one_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        workflow:
          - step: start
            tool:
              - name: a
                kind: python
                input: {x: 1}
                code: result = x
              - name: b
                kind: postgres
                auth: pg
                command: "SELECT 1"
            set:
              ctx.total: "{{ start }}"
            spec:
              policy:
                admit:
                  rules:
                    - else: {then: {allow: true}}
        """,
    )
    proc = noetl("validate", str(path))
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if " error " in line]
    assert len(errors) == 1, proc.stderr
    assert (
        "error E330: step 'start': this upstream NoETL playbook uses what this engine" in errors[0]
    )
    assert "tool pipelines" not in errors[0]  # supported: a pipeline tool
    assert "step admission rules (`spec.policy` of a step) (line 21)" in errors[0]
    assert "ctx" not in errors[0]  # a step's `set` and `ctx` are read now


# --- running -------------------------------------------------------------------------------


def test_python_names_rendered_code_results_by_step_name_and_implicit_end(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        workload:
          message: Hello
          times: 3
        workflow:
          - step: start
            desc: bare workload names, code rendered before it runs
            tool:
              kind: python
              input:
                message: "{{ message }}"
              code: |
                repeat = {{ times }}
                print(f"got {message}")
                result = {"status": "ok", "data": {"message": message * repeat}}
            next:
              spec: {mode: exclusive}
              arcs:
                - step: shout
                  when: "{{ event.name == 'call.done' and result.status == 'ok' }}"
          - step: shout
            desc: a step result under the step's name; no next, so it routes to end
            tool:
              kind: python
              input:
                text: "{{ start.data.message }}"
              code: |
                if not text:
                    return {"empty": True}
                return {"loud": text.upper(), "inputs": sorted(input_data)}
          - step: never
            desc: nothing calls it
            tool:
              kind: python
              code: result = 1
          - step: end
            tool:
              kind: python
              input:
                loud: "{{ shout.loud }}"
              code: |
                def main(loud, context):
                    return {
                        "done": loud,
                        "has_start": "start" in context,
                        "message": context.get("message"),
                    }
        """,
    )
    summary, results = run(tmp_path, path)
    assert summary["status"] == "ok", summary
    assert results["start"] == {"status": "ok", "data": {"message": "HelloHelloHello"}}
    assert results["shout"] == {"loud": "HELLOHELLOHELLO", "inputs": ["text"]}
    # older fixtures read workload keys through `context.get` too
    assert results["end"] == {"done": "HELLOHELLOHELLO", "has_start": True, "message": "Hello"}
    assert summary["steps"]["never"]["status"] == "skipped"


def test_loop_in_iterator_spec_mode_and_loop_done(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        workload:
          numbers: [1, 2, 3, 4, 5]
          width: 2
        workflow:
          - step: start
            loop:
              in: "{{ numbers }}"
              iterator: num
              spec:
                mode: parallel
                max_in_flight: "{{ width }}"
            tool:
              kind: python
              input:
                num: "{{ num }}"
              code: |
                result = {"n": num, "square": num * num}
            next:
              spec: {mode: exclusive}
              arcs:
                - step: total
                  when: "{{ event.name == 'loop.done' }}"
          - step: total
            tool:
              kind: python
              input:
                squares: "{{ start }}"
              code: |
                result = {"sum": sum(s["square"] for s in squares)}
        """,
    )
    summary, results = run(tmp_path, path)
    assert summary["status"] == "ok", summary
    assert results["total"] == {"sum": 55}
    assert summary["steps"]["start"]["total"] == 5
    with sqlite3.connect(tmp_path / "noetl.db") as con:
        (payload,) = con.execute(
            "SELECT payload FROM event_log WHERE type = 'loop.started'"
        ).fetchone()
    started = json.loads(payload)
    assert (started["mode"], started["max_concurrency"]) == ("parallel", 2)


def test_postgres_command_runs_its_statements_in_one_transaction(
    tmp_path: Path, pg_database: str
) -> None:
    env = {"NOETL_CREDENTIAL_PG_LOCAL": json.dumps({"dsn": pg_database})}
    path = write(
        tmp_path,
        """
        workload:
          pg_auth: pg_local
          table: items
        workflow:
          - step: start
            tool:
              kind: postgres
              auth: "{{ workload.pg_auth }}"
              command: |
                -- several statements, rendered first
                CREATE TABLE {{ table }} (id int PRIMARY KEY, name text);
                INSERT INTO {{ table }} VALUES (1, 'a'), (2, 'b');
                SELECT id, name FROM {{ table }} ORDER BY id;
            next:
              spec: {mode: exclusive}
              arcs:
                - step: check
          - step: check
            tool:
              kind: python
              input:
                loaded: "{{ start.command_2.rows }}"
                last: "{{ start.rows }}"
                inserted: "{{ start.command_1.row_count }}"
              code: |
                assert loaded == last == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
                result = {"inserted": inserted}
            next:
              spec: {mode: exclusive}
              arcs:
                - step: safe
          - step: safe
            desc: a value with a quote goes in as a parameter, never into the SQL text
            tool:
              kind: postgres
              auth: pg_local
              input:
                name: "O'Brien"
              command: |
                INSERT INTO items VALUES (7, %(name)s);
                SELECT name FROM items WHERE id = 7;
            next:
              spec: {mode: exclusive}
              arcs:
                - step: broken
          - step: broken
            tool:
              kind: postgres
              auth: pg_local
              command: |
                INSERT INTO items VALUES (3, 'c');
                SELECT 1 / 0;
        """,
    )
    summary, results = run(tmp_path, path, env=env)
    assert results["start"]["statement_count"] == 3
    assert results["start"]["command_0"]["rows"] == []
    assert results["check"] == {"inserted": 2}
    assert results["safe"]["rows"] == [{"name": "O'Brien"}]
    assert summary["status"] == "fail"
    assert "division by zero" in summary["steps"]["broken"]["error"]
    with psycopg.connect(pg_database) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM items ORDER BY id")]
    assert ids == [1, 2, 7]  # the failed command's insert was rolled back with it


def test_duckdb_command_shares_a_database_through_the_execution(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        workflow:
          - step: start
            tool:
              kind: duckdb
              commands: |
                CREATE TABLE t AS SELECT range AS n FROM range(4);
                SELECT count(*) AS c FROM t;
            next:
              spec: {mode: exclusive}
              arcs:
                - step: again
          - step: again
            tool:
              kind: duckdb
              query: SELECT sum(n) AS s FROM t
        """,
    )
    summary, results = run(tmp_path, path)
    assert summary["status"] == "ok", summary
    assert results["start"]["command_1"]["rows"] == [{"c": 4}]
    assert results["again"]["rows"] == [{"s": 6}]
    assert len(list((tmp_path / ".noetl" / "duckdb").glob("*.duckdb"))) == 1


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        url = urlsplit(self.path)
        seen = {
            "method": self.command,
            "path": url.path,
            "query": {k: v[0] for k, v in parse_qs(url.query).items()},
            "json": json.loads(body) if body else None,
        }
        self.server.requests.append(seen)
        data = json.dumps({"seen": seen}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = _answer


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_http_data_payload_and_endpoint(tmp_path: Path, recorder: _Recorder) -> None:
    path = write(
        tmp_path,
        """
        workload:
          api_url: http://unused.invalid
          page: 2
        workflow:
          - step: start
            tool:
              kind: http
              endpoint: "{{ api_url }}/items"
              data:
                page: "{{ page }}"
            next:
              spec: {mode: exclusive}
              arcs:
                - step: create
          - step: create
            tool:
              kind: http
              method: POST
              url: "{{ api_url }}/items"
              data:
                name: "item {{ start.data.seen.query.page }}"
            next:
              spec: {mode: exclusive}
              arcs:
                - step: replace
          - step: replace
            tool:
              kind: http
              method: PUT
              url: "{{ api_url }}/items/1"
              payload:
                name: renamed
        """,
    )
    summary, results = run(tmp_path, path, "--set", f"api_url={recorder.base}")
    assert summary["status"] == "ok", summary
    assert recorder.requests == [
        {"method": "GET", "path": "/items", "query": {"page": "2"}, "json": None},
        {"method": "POST", "path": "/items", "query": {}, "json": {"name": "item 2"}},
        {"method": "PUT", "path": "/items/1", "query": {}, "json": {"name": "renamed"}},
    ]
    assert results["replace"]["status_code"] == 200
