"""`script:` files through the real CLI: `noetl run` reads them from the playbooks root
(the working directory) when the execution starts; the SQL and code are then what inline
SQL and code would be (templates, in upstream's dialect)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from tests.acceptance.test_upstream_run import noetl, run, write

FLOW = """
workload:
  scripts: ./scripts
  table: greetings
workflow:
  - step: start
    tool:
      kind: python
      script:
        uri: "{{ scripts }}/greet.py"
        source: {type: file}
      input: {name: Ada, count: 2}
    next:
      spec: {mode: exclusive}
      arcs: [{step: store}]
  - step: store
    tool:
      kind: duckdb
      script: {uri: scripts/store.sql, source: {type: file}}
      input: {said: "{{ start.said | join(',') }}"}
"""


def scripts(root: Path) -> None:
    folder = root / "scripts"
    folder.mkdir()
    (folder / "greet.py").write_text(
        "def main(name, count=1):\n    return {'said': [name] * count}\n", encoding="utf-8"
    )
    (folder / "store.sql").write_text(
        "CREATE TABLE {{ table }} (said VARCHAR);\n"
        "INSERT INTO {{ table }} VALUES ($said);\n"
        "SELECT said FROM {{ table }};\n",
        encoding="utf-8",
    )


def test_python_and_duckdb_run_the_files_they_name(tmp_path: Path) -> None:
    scripts(tmp_path)
    summary, results = run(tmp_path, write(tmp_path, FLOW))
    assert summary["status"] == "ok", summary
    assert results["start"] == {"said": ["Ada", "Ada"]}
    assert results["store"]["rows"] == [{"said": "Ada,Ada"}]


def test_a_missing_file_stops_the_run_before_it_starts(tmp_path: Path) -> None:
    path = write(tmp_path, FLOW)
    proc = noetl("run", str(path), "--json", "--db", str(tmp_path / "n.db"), cwd=tmp_path)
    assert proc.returncode != 0
    doc = json.loads(proc.stdout)
    assert doc["status"] == "invalid"
    (diag,) = [d for d in doc["diagnostics"] if d["code"] == "E332"][:1]
    assert diag["step"] == "start"
    assert "./scripts/greet.py" in diag["message"]


def test_postgres_runs_the_statements_of_its_file(tmp_path: Path, pg_database: str) -> None:
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "setup.sql").write_text(
        "-- a migration kept in a file\n"
        "CREATE TABLE script_items (id int PRIMARY KEY, note text);\n"
        "INSERT INTO script_items VALUES (1, 'from a file'), (2, 'again');\n"
        "SELECT count(*) AS total FROM script_items;\n",
        encoding="utf-8",
    )
    env = {"NOETL_CREDENTIAL_PG_LOCAL": json.dumps({"dsn": pg_database})}
    path = write(
        tmp_path,
        """
        workload:
          pg_auth: pg_local
        workflow:
          - step: start
            tool:
              kind: postgres
              auth: "{{ pg_auth }}"
              script: {uri: sql/setup.sql, source: {type: file}}
        """,
    )
    summary, results = run(tmp_path, path, env=env)
    assert summary["status"] == "ok", summary
    assert results["start"]["statement_count"] == 3
    assert results["start"]["rows"] == [{"total": 2}]
    with psycopg.connect(pg_database) as conn:
        notes = [row[0] for row in conn.execute("SELECT note FROM script_items ORDER BY id")]
    assert notes == ["from a file", "again"]
