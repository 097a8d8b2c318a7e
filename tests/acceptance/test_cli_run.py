"""`noetl run` end to end: the real CLI in a subprocess, real playbooks, a real SQLite file."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from tests.helpers.cli import noetl


def run_json(path: Path, db: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    proc = noetl("run", str(path), "--json", "--db", str(db), *extra)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_hello_world(tmp_path: Path) -> None:
    code, out = run_json(EXAMPLES / "hello_world.yaml", tmp_path / "db.sqlite")
    assert code == 0
    assert out["status"] == "ok"
    assert out["context"]["greeting"] == {"message": "Hello, World!"}
    assert out["context"]["loud"] == {"message": "HELLO, WORLD!", "length": 13}
    assert out["steps"] == {"start": {"status": "ok"}, "shout": {"status": "ok"}}
    assert out["execution_id"].isdigit()


def test_the_upstream_dialect_example_runs_as_written(tmp_path: Path) -> None:
    code, out = run_json(EXAMPLES / "upstream_pipeline.yaml", tmp_path / "db.sqlite")
    assert code == 0
    assert out["status"] == "ok"
    assert out["ctx"] == {"expected": 5, "total": 12}
    assert out["steps"]["report"] == {"status": "ok"}
    assert out["steps"]["nothing"] == {"status": "skipped"}
    code, out = run_json(
        EXAMPLES / "upstream_pipeline.yaml", tmp_path / "db2.sqlite", "--set", "threshold=9"
    )
    assert code == 0
    assert out["ctx"] == {"expected": 5, "total": 0}
    assert out["steps"]["nothing"] == {"status": "ok"}


def test_hello_world_with_set(tmp_path: Path) -> None:
    code, out = run_json(EXAMPLES / "hello_world.yaml", tmp_path / "db.sqlite", "--set", "name=Ada")
    assert code == 0
    assert out["context"]["greeting"] == {"message": "Hello, Ada!"}


def test_fan_out_join(tmp_path: Path) -> None:
    code, out = run_json(EXAMPLES / "fan_out_join.yaml", tmp_path / "db.sqlite")
    assert code == 0
    assert out["context"]["joined"] == {
        "sources": ["A", "B"],
        "items": [1, 2, 3, 10, 20],
        "total": 36,
    }
    assert {s["status"] for s in out["steps"].values()} == {"ok"}


def test_parallel_loop_collect(tmp_path: Path) -> None:
    code, out = run_json(EXAMPLES / "parallel_loop_collect.yaml", tmp_path / "db.sqlite")
    assert code == 0
    assert out["context"]["squares"] == [1, 4, 9, 16, 25, 36, 49, 64, 81, 100]
    assert out["context"]["summary"] == {"count": 10, "sum": 385}
    loop = next(s for s in out["steps"].values() if "total" in s)
    assert loop == {"status": "ok", "total": 10, "completed": 10, "succeeded": 10, "failed": 0}


@pytest.mark.parametrize(
    ("amount", "branch"), [(5000, "large_order"), (250, "medium_order"), (20, "small_order")]
)
def test_conditional_routing(tmp_path: Path, amount: int, branch: str) -> None:
    code, out = run_json(
        EXAMPLES / "conditional_routing.yaml", tmp_path / "db.sqlite", "--set", f"amount={amount}"
    )
    assert code == 0
    ran = {name for name, s in out["steps"].items() if s["status"] == "ok"}
    assert ran == {"start", branch}
    assert out["context"]["decision"]["amount"] == amount


def test_failure_routed_to_compensation(tmp_path: Path) -> None:
    code, out = run_json(EXAMPLES / "failure_compensation.yaml", tmp_path / "db.sqlite")
    assert code == 0
    assert out["status"] == "ok"
    assert out["steps"]["charge"]["status"] == "failed"
    assert "card declined" in out["steps"]["charge"]["error"]
    assert out["steps"]["confirm"]["status"] == "skipped"
    assert out["context"]["released"] == {"released": "slot-u42", "reason": "charge failed"}


def test_saga_compensates_and_exits_1(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    code, out = run_json(EXAMPLES / "saga.yaml", db)
    assert code == 1
    assert out["status"] == "fail"
    assert out["steps"]["ship"]["status"] == "failed"
    assert "no courier available" in out["steps"]["ship"]["error"]
    assert out["steps"]["refund"] == {"status": "ok"}
    assert out["steps"]["release"] == {"status": "ok"}
    assert {"refund_result", "release_result"} <= set(out["context"])
    with sqlite3.connect(db) as conn:
        started = [
            r[0]
            for r in conn.execute(
                "SELECT step FROM event_log WHERE execution_id = ? AND type = 'step.started' "
                "ORDER BY seq",
                (out["execution_id"],),
            )
        ]
    assert started == ["reserve", "charge", "ship", "refund", "release"]


def test_saga_without_failure_runs_no_compensation(tmp_path: Path) -> None:
    code, out = run_json(
        EXAMPLES / "saga.yaml", tmp_path / "db.sqlite", "--set", "fail_shipping=false"
    )
    assert code == 0
    assert out["steps"]["refund"] == {"status": "skipped"}
    assert out["steps"]["release"] == {"status": "skipped"}


def test_events_are_persisted_gapless(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    code, out = run_json(EXAMPLES / "fan_out_join.yaml", db)
    assert code == 0
    with sqlite3.connect(db) as conn:
        seqs = [
            r[0]
            for r in conn.execute(
                "SELECT seq FROM event_log WHERE execution_id = ? ORDER BY seq",
                (out["execution_id"],),
            )
        ]
        status = conn.execute(
            "SELECT status FROM execution WHERE execution_id = ?", (out["execution_id"],)
        ).fetchone()[0]
        types = [
            r[0]
            for r in conn.execute(
                "SELECT type FROM event_log WHERE execution_id = ? ORDER BY seq",
                (out["execution_id"],),
            )
        ]
    assert seqs == list(range(1, len(seqs) + 1))
    assert status == "ok"
    assert types[0] == "workflow.started"
    assert types[-1] == "workflow.finished"
    assert types.count("step.started") == 4


def test_db_from_environment(tmp_path: Path) -> None:
    db = tmp_path / "from_env.db"
    proc = noetl(
        "run", EXAMPLES / "hello_world.yaml", "--json", cwd=tmp_path, env={"NOETL_DB": str(db)}
    )
    assert proc.returncode == 0, proc.stderr
    assert db.exists()
    assert not (tmp_path / ".noetl").exists()


def test_default_db_under_dot_noetl(tmp_path: Path) -> None:
    proc = noetl("run", str(EXAMPLES / "hello_world.yaml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / ".noetl" / "noetl.db").exists()
    assert "finished: ok" in proc.stdout


def test_workload_file(tmp_path: Path) -> None:
    workload = tmp_path / "w.json"
    workload.write_text(json.dumps({"name": "Grace"}), encoding="utf-8")
    code, out = run_json(
        EXAMPLES / "hello_world.yaml", tmp_path / "db.sqlite", "--workload", str(workload)
    )
    assert code == 0
    assert out["context"]["greeting"] == {"message": "Hello, Grace!"}


def test_invalid_playbook_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("metadata: {name: x}\nworkflow:\n  - step: a\n    nxt: b\n", encoding="utf-8")
    proc = noetl("run", str(bad), "--db", str(tmp_path / "db.sqlite"))
    assert proc.returncode == 1
    assert f"{bad}:4:" in proc.stderr
    assert "unknown step key 'nxt'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_json_run_of_an_invalid_playbook_prints_its_diagnostics(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("metadata: {name: x}\nworkflow:\n  - step: a\n    nxt: b\n", encoding="utf-8")
    proc = noetl("run", str(bad), "--json", "--db", str(tmp_path / "db.sqlite"))
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["status"] == "invalid"
    [diagnostic] = out["diagnostics"]
    assert diagnostic["file"] == str(bad) and diagnostic["line"] == 4
    assert diagnostic["code"] == "E100" and "unknown step key 'nxt'" in diagnostic["message"]
    assert f"{bad}:4:" in proc.stderr  # people still read stderr


def test_json_run_prints_json_whatever_stops_it(tmp_path: Path) -> None:
    missing = noetl("run", str(tmp_path / "nope.yaml"), "--json")
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["diagnostics"][0]["message"] == "file not found"
    usage = noetl("run", str(EXAMPLES / "hello_world.yaml"), "--json", "--set", "novalue")
    assert usage.returncode == 2
    assert json.loads(usage.stdout) == {
        "status": "error",
        "error": "Invalid value for --set: expected key=value, got 'novalue'",
    }
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    env_problem = noetl(
        "run", str(EXAMPLES / "hello_world.yaml"), "--json", "--db", str(blocker / "db.sqlite")
    )
    assert env_problem.returncode == 3
    error = json.loads(env_problem.stdout)
    assert error["status"] == "error" and str(blocker) in error["error"]


def test_bad_set_and_workload_errors(tmp_path: Path) -> None:
    proc = noetl("run", str(EXAMPLES / "hello_world.yaml"), "--set", "novalue")
    assert proc.returncode == 2
    assert "expected key=value" in proc.stderr
    bad = tmp_path / "w.json"
    bad.write_text("{not json", encoding="utf-8")
    proc = noetl("run", str(EXAMPLES / "hello_world.yaml"), "--workload", str(bad))
    assert proc.returncode == 2
    assert f"{bad}:1: invalid JSON" in proc.stderr


def test_unreachable_database_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    proc = noetl("run", str(EXAMPLES / "hello_world.yaml"), "--db", str(blocker / "db.sqlite"))
    assert proc.returncode == 3
    assert str(blocker) in proc.stderr
    assert "Traceback" not in proc.stderr


def test_user_code_crash_fails_the_task_not_the_runtime(tmp_path: Path) -> None:
    playbook = tmp_path / "crash.yaml"
    playbook.write_text(
        """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: crash}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import os
        def main(context, args):
            os._exit(7)
    next: [{step: after, when: "{{ fail('start') }}"}]
  - step: after
    tool: {kind: python, code: "def main(context, args):\\n    return 'recovered'\\n"}
    result: {as: after}
""",
        encoding="utf-8",
    )
    code, out = run_json(playbook, tmp_path / "db.sqlite")
    assert code == 0
    assert out["steps"]["start"]["status"] == "failed"
    assert "exited with code 7" in out["steps"]["start"]["error"]
    assert out["context"]["after"] == "recovered"


@pytest.mark.services
def test_run_on_postgres(pg_database: str) -> None:
    proc = noetl("run", str(EXAMPLES / "fan_out_join.yaml"), "--json", "--db", pg_database)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["context"]["joined"]["total"] == 36
    from noetl.store import open_store

    store = open_store(pg_database)
    try:
        record = store.get_execution(out["execution_id"])
        events = store.load_events(out["execution_id"])
    finally:
        store.close()
    assert record is not None and record.status.value == "ok"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def test_secrets_resolve_from_the_upper_case_environment_variable(tmp_path: Path) -> None:
    playbook = tmp_path / "secret.yaml"
    playbook.write_text(
        """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: secret}
workflow:
  - step: start
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              return {"length": len(args["token"]), "upper": args["token"].isupper()}
      args:
        token: "{{ secrets.api_token }}"
    result: {as: checked}
""",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "noetl",
            "run",
            str(playbook),
            "--json",
            "--db",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "NOETL_SECRET_API_TOKEN": "ABCDEFGHIJ"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["context"]["checked"] == {"length": 10, "upper": True}
    assert "ABCDEFGHIJ" not in proc.stdout + proc.stderr
