"""`case` end to end: the real CLI in a subprocess runs examples/case_routing.yaml and
playbooks whose branches write sinks on the worker and dead-letter a failed branch task
that `noetl dlq replay` then runs again; `noetl validate` reports a case mistake."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from tests.conftest import EXAMPLES
from tests.helpers.cli import noetl

EXAMPLE = EXAMPLES / "case_routing.yaml"


def run_json(path: Path, db: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    # The file sink writes under the working directory: run where the test's files are.
    proc = noetl("run", str(path), "--json", "--db", str(db), *extra, cwd=db.parent)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_the_example_reserves_an_item_in_stock_and_ships_it(tmp_path: Path) -> None:
    code, out = run_json(EXAMPLE, tmp_path / "db.sqlite")
    assert code == 0
    assert out["status"] == "ok"
    assert out["context"] == {
        "outcome": "reserved",
        "reservation": {"sku": "A-100", "quantity": 3, "left": 7},
        "priority": "normal",
        "label": "A-100 x 3",
        "shipment": {"label": "A-100 x 3", "priority": "normal", "left": 7},
    }
    assert out["steps"] == {
        "lookup": {"status": "ok"},
        "ship": {"status": "ok"},
        "reject": {"status": "skipped"},
        "backorder": {"status": "skipped"},
    }


def test_the_example_rejects_an_unknown_sku(tmp_path: Path) -> None:
    code, out = run_json(EXAMPLE, tmp_path / "db.sqlite", "--set", "sku=Z-999")
    assert code == 0
    assert out["context"] == {
        "outcome": "unknown_sku",
        "rejection": {"reason": "unknown sku Z-999"},
    }
    assert [name for name, s in out["steps"].items() if s["status"] == "ok"] == [
        "lookup",
        "reject",
    ]


def test_the_example_backorders_when_stock_is_short(tmp_path: Path) -> None:
    code, out = run_json(EXAMPLE, tmp_path / "db.sqlite", "--set", "quantity=50")
    assert code == 0
    assert out["context"] == {
        "outcome": "backorder",
        "backordered": {"sku": "A-100", "wanted": 50},
    }


SINKS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: case_sinks}}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        def main(context, args):
            return {{"status": "ready", "rows": [{{"id": 1}}, {{"id": 2}}]}}
    spec: {{eval_mode: on_event, case_mode: inclusive}}
    case:
      - when: "{{{{ this.status == 'ready' }}}}"
        then:
          result: {{pick: "{{{{ this.rows }}}}"}}
          sink: [{{file: {{path: "{rows}"}}}}]
      - when: true
        then:
          tool:
            kind: python
            code: |
              def main(context, args):
                  return {{"count": args["n"]}}
            args: {{n: "{{{{ this.rows | length }}}}"}}
          result:
            as: summary
            sink: [{{file: {{path: "{summary}", format: jsonl}}}}]
"""


def test_branch_sinks_are_written_by_the_worker(tmp_path: Path) -> None:
    rows, summary = tmp_path / "out" / "rows.json", tmp_path / "summary.jsonl"
    path = tmp_path / "sinks.yaml"
    path.write_text(SINKS.format(rows=rows, summary=summary), encoding="utf-8")

    code, out = run_json(path, tmp_path / "db.sqlite")

    assert code == 0, out
    assert out["context"] == {"summary": {"count": 2}}
    assert json.loads(rows.read_text(encoding="utf-8")) == [{"id": 1}, {"id": 2}]
    assert [json.loads(line) for line in summary.read_text(encoding="utf-8").splitlines()] == [
        {"count": 2}
    ]


DIVIDE = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: case_divide}
workflow:
  - step: start
    spec: {eval_mode: on_entry}
    case:
      - when: true
        then:
          tool:
            kind: python
            code: |
              def main(context, args):
                  return 10 / args["d"]
            args: {d: 0}
            retry: {max_attempts: 2, initial_delay: 0}
          result: {as: q}
    tool:
      kind: python
      code: "def main(context, args):\\n    return args['q'] + 1\\n"
      args: {q: "{{ q }}"}
    result: {as: total}
"""


def test_a_dead_lettered_branch_task_is_replayed_and_the_step_goes_on(tmp_path: Path) -> None:
    path, db = tmp_path / "divide.yaml", tmp_path / "noetl.db"
    path.write_text(DIVIDE, encoding="utf-8")
    code, out = run_json(path, db)
    assert code == 1
    assert out["steps"]["start"]["status"] == "failed"
    assert out["steps"]["start"]["error"].startswith(
        "case[0].then.tool: ZeroDivisionError: division by zero\n"
    )
    execution_id = out["execution_id"]
    message_id = f"{execution_id}.start.case0"

    listed = noetl("dlq", "list", "--json", "--db", str(db))
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)["items"]
    assert (entry["message_id"], entry["step"], entry["reason"], entry["attempts"]) == (
        message_id,
        "start",
        "exhausted",
        2,
    )

    replayed = noetl("dlq", "replay", message_id, "--patch", "args.d=2", "--db", str(db))
    assert replayed.returncode == 0, replayed.stderr
    assert f"execution {execution_id} ok" in replayed.stdout
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT payload FROM event_log WHERE execution_id = ? AND type = ? ORDER BY seq",
            (execution_id, "case.branch.finished"),
        ).fetchall()
    finished = [json.loads(payload) for (payload,) in rows]
    assert [(f["ok"], f.get("result")) for f in finished] == [(False, None), (True, 5.0)]
    with sqlite3.connect(db) as conn:
        (context,) = conn.execute(
            "SELECT context FROM execution WHERE execution_id = ?", (execution_id,)
        ).fetchone()
    assert json.loads(context) == {"q": 5.0, "total": 6.0}


def test_validate_reports_a_case_mistake_with_file_line_step_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "apiVersion: noetl.io/v2\n"
        "kind: Playbook\n"
        "metadata: {name: bad}\n"
        "workflow:\n"
        "  - step: call\n"
        "    tool: noop\n"
        "    spec: {eval_mode: on_entry}\n"
        "    case:\n"
        "      - when: true\n"
        "        then:\n"
        "          retry: 3\n",
        encoding="utf-8",
    )
    proc = noetl("validate", str(path))
    assert proc.returncode == 1
    assert (
        f"{path}:11: error E321: step 'call': a case retry runs the step's tool again, which "
        f"has not run yet on entry; drop spec.eval_mode: on_entry "
        f"[workflow[0].case[0].then.retry]"
    ) in proc.stdout + proc.stderr


# Seed 004's flow: the tool runs, the case reads its outcome, then the step routes.
OUTCOME = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: case_outcome}
workload: {n: 5}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        def main(context, args):
            return {"n": args["n"]}
      args: {n: "{{ workload.n }}"}
    case:
      - when: "{{ result.n > 3 }}"
        then: {set: {size: big}, next: big}
    next: small
  - step: big
  - step: small
"""


def test_a_case_reads_the_tools_outcome_by_default(tmp_path: Path) -> None:
    path, db = tmp_path / "outcome.yaml", tmp_path / "noetl.db"
    path.write_text(OUTCOME, encoding="utf-8")
    code, out = run_json(path, db)
    assert code == 0
    assert out["context"] == {"size": "big"}
    assert {name: s["status"] for name, s in out["steps"].items()} == {
        "start": "ok",
        "big": "ok",
        "small": "skipped",
    }
    code, out = run_json(path, db, "--set", "n=2")
    assert code == 0
    assert out["context"] == {}
    assert out["steps"]["small"]["status"] == "ok"
    assert out["steps"]["big"]["status"] == "skipped"


def test_validate_reports_an_on_entry_condition_that_reads_the_outcome(tmp_path: Path) -> None:
    path = tmp_path / "on_entry.yaml"
    path.write_text(
        OUTCOME.replace("    case:\n", "    spec: {eval_mode: on_entry}\n    case:\n"),
        encoding="utf-8",
    )
    proc = noetl("validate", str(path))
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[0] == (
        f"{path}:15: error E325: step 'start': when reads 'result', the tool's outcome, but "
        "spec.eval_mode: on_entry evaluates the case before the tool runs, so it never "
        "matches; drop eval_mode: on_entry to evaluate it on the tool's outcome "
        "[workflow[0].case[0].when]"
    )
