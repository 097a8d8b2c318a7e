"""Upstream NoETL's execution variables (`ctx`, `set:`, `iter`) through the real CLI:
`noetl run` of a small upstream-style playbook, against a real SQLite file and a real
PostgreSQL, its log folded again to the same values."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.helpers.ctx_playbooks import CTX_CHECK, CTX_FINAL, CTX_PLAYBOOK, CTX_STEPS, ctx_of


def test_ctx_flows_through_set_loops_sql_and_code(tmp_path: Path, pg_database: str) -> None:
    path = tmp_path / "ctx_flow.yaml"
    path.write_text(CTX_PLAYBOOK, encoding="utf-8")
    db = tmp_path / "noetl.db"
    proc = subprocess.run(
        [sys.executable, "-m", "noetl", "run", str(path), "--json", "--db", str(db)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NOETL_CREDENTIAL_PG_LOCAL": json.dumps({"dsn": pg_database})},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["status"] == "ok", summary
    assert summary["steps"]["never"]["status"] == "skipped"
    assert summary["ctx"] == CTX_FINAL
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT seq, type, execution_id, ts, step, payload FROM event_log ORDER BY seq"
        ).fetchall()
    events = [
        {"seq": s, "type": t, "execution_id": e, "ts": ts, "step": st, "payload": json.loads(p)}
        for s, t, e, ts, st, p in rows
    ]
    assert ctx_of(events, CTX_STEPS) == CTX_FINAL
    check = [e for e in events if e["type"] == "step.finished" and e["step"] == "check"]
    assert check[0]["payload"]["result"] == CTX_CHECK
    patches = [(e["type"], e["step"]) for e in events if "ctx" in e["payload"]]
    assert patches == [
        ("step.finished", "start"),
        ("next.evaluated", "start"),
        ("step.finished", "each"),
        ("next.evaluated", "each"),
        ("step.finished", "store"),
    ]
    with psycopg.connect(pg_database) as conn:
        words = conn.execute("SELECT word FROM ctx_words ORDER BY position").fetchall()
    assert [w for (w,) in words] == ["A", "B", "C"]
