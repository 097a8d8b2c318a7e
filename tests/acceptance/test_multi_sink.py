"""Seed 003, acceptance test 3 (multi-sink): the real `noetl run` CLI in a subprocess, a
python step whose rows go to PostgreSQL (upsert by key), a DuckDB file and a jsonl file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from noetl.store import open_store
from tests.helpers.cli import noetl

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: multi_sink
workload:
  out_dir: "."
  scale: 1
workflow:
  - step: start
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              rows = [{"id": i, "name": n, "score": i * args["scale"]}
                      for i, n in enumerate(["ada", "bob", "cy"], start=1)]
              return {"rows": rows, "count": len(rows)}
      args:
        scale: "{{ workload.scale }}"
    result:
      pick: "{{ this.rows }}"
      as: rows
      sink:
SINKS
    next: done
  - step: done
    tool: noop
"""

GOOD_SINKS = """\
        - postgres:
            id: warehouse
            table: public.scores
            mode: upsert
            key: id
            credential: SINK_PG
        - duckdb:
            id: local
            database: "{{ workload.out_dir }}/scores.duckdb"
            table: scores
            mode: upsert
            key: [id]
        - file:
            id: export
            path: "{{ workload.out_dir }}/scores.jsonl"
            format: jsonl
"""

BAD_SINKS = """\
        - file:
            id: export
            path: "{{ workload.out_dir }}/scores.jsonl"
            format: jsonl
        - postgres:
            id: warehouse
            table: scores
            credential: SINK_PG_DOWN
        - duckdb:
            id: local
            database: "{{ workload.out_dir }}/scores.duckdb"
            table: scores
"""


def noetl_run(playbook: Path, db: Path, *sets: str) -> tuple[int, dict[str, Any]]:
    args = ["run", str(playbook), "--json", "--db", str(db)]
    for item in sets:
        args += ["--set", item]
    # The file sink writes under the working directory: run where the test's files are.
    proc = noetl(*args, cwd=db.parent, timeout=60, no_traceback=True)
    return proc.returncode, json.loads(proc.stdout)


def tool_outcomes(db: Path, execution_id: str) -> list[dict[str, Any]]:
    store = open_store(str(db))
    try:
        events = store.load_events(execution_id)
    finally:
        store.close()
    return [e.payload for e in events if e.type == "tool.processed" and e.step == "start"]


@pytest.fixture
def warehouse(pg_database: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The target database, named to the run through a credential (not a template)."""
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute("CREATE TABLE scores (id int PRIMARY KEY, name text, score int)")
    monkeypatch.setenv("NOETL_CREDENTIAL_SINK_PG", pg_database)
    # A server that is not there: nothing listens on port 1.
    monkeypatch.setenv(
        "NOETL_CREDENTIAL_SINK_PG_DOWN",
        json.dumps({"dsn": "postgresql://noetl@127.0.0.1:1/none?connect_timeout=2"}),
    )
    return pg_database


def warehouse_rows(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT id, name, score FROM scores ORDER BY id").fetchall()


@pytest.mark.services
def test_all_three_sinks_receive_the_rows_and_a_rerun_writes_nothing_twice(
    tmp_path: Path, warehouse: str
) -> None:
    playbook = tmp_path / "multi_sink.yaml"
    playbook.write_text(PLAYBOOK.replace("SINKS\n", GOOD_SINKS), encoding="utf-8")
    db = tmp_path / "noetl.db"
    code, out = noetl_run(playbook, db, f"out_dir={tmp_path}")
    assert code == 0, out
    assert out["status"] == "ok"
    expected = [(1, "ada", 1), (2, "bob", 2), (3, "cy", 3)]
    assert warehouse_rows(warehouse) == expected
    with duckdb.connect(str(tmp_path / "scores.duckdb")) as conn:
        assert conn.execute("SELECT * FROM scores ORDER BY id").fetchall() == expected
    lines = (tmp_path / "scores.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == out["context"]["rows"]
    [outcome] = tool_outcomes(db, out["execution_id"])
    assert [(s["id"], s["status"], s["rows"]) for s in outcome["sinks"]] == [
        ("warehouse", "ok", 3),
        ("local", "ok", 3),
        ("export", "ok", 3),
    ]
    assert outcome["sinks"][0]["key"] == f"{out['execution_id']}:start:warehouse"

    # The run again, as after a crash that lost its result: the upserts write nothing twice.
    code, again = noetl_run(playbook, db, f"out_dir={tmp_path}", "scale=10")
    assert code == 0, again
    assert again["execution_id"] != out["execution_id"]
    rerun = [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)]
    assert warehouse_rows(warehouse) == rerun
    with duckdb.connect(str(tmp_path / "scores.duckdb")) as conn:
        assert conn.execute("SELECT * FROM scores ORDER BY id").fetchall() == rerun
    assert len((tmp_path / "scores.jsonl").read_text(encoding="utf-8").splitlines()) == 3


@pytest.mark.services
def test_a_sink_that_cannot_write_fails_the_step_and_the_execution(
    tmp_path: Path, warehouse: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The configured default retry of a sink without `retry` (8 attempts otherwise).
    monkeypatch.setenv("NOETL_RETRIES_SINK_MAX_ATTEMPTS", "3")
    playbook = tmp_path / "bad_sink.yaml"
    playbook.write_text(PLAYBOOK.replace("SINKS\n", BAD_SINKS), encoding="utf-8")
    db = tmp_path / "noetl.db"
    code, out = noetl_run(playbook, db, f"out_dir={tmp_path}")
    assert code == 1
    assert out["status"] == "fail"
    assert out["steps"]["start"]["status"] == "failed"
    assert out["steps"]["done"]["status"] != "ok"
    assert "rows" not in out["context"]
    [outcome] = tool_outcomes(db, out["execution_id"])
    assert outcome["ok"] is False and outcome["error_type"] == "SinkError"
    assert outcome["error"].startswith("sink 'warehouse' (postgres) failed after 3 attempts: ")
    assert [(s["id"], s["status"]) for s in outcome["sinks"]] == [
        ("export", "ok"),
        ("warehouse", "failed"),
        ("local", "skipped"),
    ]
    assert (tmp_path / "scores.jsonl").exists()  # written before the failing sink
    assert not (tmp_path / "scores.duckdb").exists()  # skipped after it
    assert warehouse_rows(warehouse) == []
