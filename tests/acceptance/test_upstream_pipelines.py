"""Tool pipelines and task policy rules of upstream NoETL playbooks, through `noetl run`:
a real loopback HTTP server (500, 500, then 200), a real PostgreSQL, the python pool."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.helpers.pipeline_playbooks import (
    CountingApi,
    ctx_patch,
    exhausted_playbook,
    loop_playbook,
    pipeline_playbook,
)


@pytest.fixture
def api() -> Iterator[CountingApi]:
    server = CountingApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def run(tmp_path: Path, text: str, env: dict[str, str]) -> tuple[dict[str, Any], list[Any]]:
    path = tmp_path / "playbook.yaml"
    path.write_text(text, encoding="utf-8")
    db = tmp_path / "noetl.db"
    proc = subprocess.run(
        [sys.executable, "-m", "noetl", "run", str(path), "--json", "--db", str(db)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout, proc.stderr
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT type, step, payload FROM event_log ORDER BY seq").fetchall()
    events = [{"type": t, "step": s, "payload": json.loads(p)} for t, s, p in rows]
    return json.loads(proc.stdout), events


def test_a_pipeline_retries_reads_earlier_results_loops_and_sets_ctx(
    tmp_path: Path, api: CountingApi, pg_database: str
) -> None:
    key = "k" + uuid.uuid4().hex[:8]  # a bare hex key can read as a YAML number
    env = {"NOETL_CREDENTIAL_PG_LOCAL": json.dumps({"dsn": pg_database})}
    summary, events = run(tmp_path, pipeline_playbook(api.base, key), env)
    assert summary["status"] == "ok", json.dumps(summary)[:3000]
    # three tries of the pipeline's http task, three of the single tool's: one task each
    assert api.calls[f"/flaky/{key}-a"] == 3
    assert api.calls[f"/flaky/{key}-b"] == 3
    # each try is an attempt of the step's task, retried by the engine after the rule's delay
    dispatched = [e["step"] for e in events if e["type"] == "tool.processed"]
    assert dispatched == ["start"] * 3 + ["single"] * 3 + ["check"]
    retries = [e["payload"] for e in events if e["type"] == "retry.started"]
    assert [(r["reason"], r["task"], r["try"], r["attempt"]) for r in retries[:2]] == [
        ("rule", "fetch", 1, 2),
        ("rule", "fetch", 2, 3),
    ]
    # the attempts after the first resume at the retried task: its earlier tasks ran once
    [first, _, last] = [e["payload"] for e in events if e["type"] == "tool.processed"][:3]
    assert [t["task"] for t in first["tasks"]] == ["fetch"]
    assert last["tasks"][0]["task"] == "fetch" and last["ok"]
    assert all(t["attempt"] == 3 for t in last["tasks"])
    assert ctx_patch(events, "start") == {"fetched_on": 3, "counted": 3}


def test_retries_exhausted_fail_the_step_for_good(tmp_path: Path, api: CountingApi) -> None:
    key = "k" + uuid.uuid4().hex[:8]  # a bare hex key can read as a YAML number
    summary, events = run(tmp_path, exhausted_playbook(api.base, key), {})
    assert summary["status"] == "fail"
    assert api.calls[f"/down/{key}"] == 2
    first, processed = [e for e in events if e["type"] == "tool.processed"]
    assert first["payload"]["retry"]["try"] == 1
    payload = processed["payload"]
    assert payload["ok"] is False
    assert payload["error"].startswith("task 'down' failed after 2 attempts: HTTP 500")
    assert payload["retryable"] is False
    assert payload["error_type"] == "PolicyFailure"  # final: the engine does not retry it
    [exhausted] = [e["payload"] for e in events if e["type"] == "retry.processed"]
    assert exhausted["reason"] == "rule" and exhausted["task"] == "down"
    [dead] = [e["payload"] for e in events if e["type"] == "task.dead_lettered"]
    assert dead["reason"] == "exhausted"


def test_each_loop_item_runs_its_own_pipeline(tmp_path: Path) -> None:
    summary, events = run(tmp_path, loop_playbook(), {})
    assert summary["status"] == "ok", json.dumps(summary)[:3000]
    processed = [e["step"] for e in events if e["type"] == "tool.processed"]
    assert processed.count("start") == 3


def test_a_native_pipeline_keeps_code_literal_and_renders_args(tmp_path: Path) -> None:
    text = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: native}
workload: {n: 4}
workflow:
  - step: start
    tool:
      kind: pipeline
      spec:
        tasks:
          - name: double
            tool:
              kind: python
              args: {n: "{{ workload.n }}"}
              spec:
                code: |
                  def main(context, args):
                      return {"text": "{{ not rendered }}", "n": args["n"] * 2}
          - name: check
            tool:
              kind: python
              args: {prev: "{{ _prev }}", doubled: "{{ double.n }}"}
              spec:
                code: |
                  def main(context, args):
                      assert args["prev"]["text"] == "{{ not rendered }}", args
                      assert args["doubled"] == 8, args
                      return args["doubled"]
            rules:
              - when: "{{ output.data == 8 }}"
                then: {do: break}
"""
    summary, events = run(tmp_path, text, {})
    assert summary["status"] == "ok", json.dumps(summary)[:3000]
    [finished] = [e for e in events if e["type"] == "step.finished"]
    assert finished["payload"]["result"] == 8


def test_a_labeled_task_may_call_a_workbook_task(tmp_path: Path) -> None:
    text = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: wb}
workbook:
  - name: twice
    tool:
      kind: python
      input: {n: 0}
      code: |
        result = n * 2
workflow:
  - step: start
    tool:
      - name: first
        kind: python
        input: {}
        code: |
          result = 21
      - call:
          kind: workbook
          name: twice
          input: {n: "{{ _prev }}"}
"""
    summary, events = run(tmp_path, text, {})
    assert summary["status"] == "ok", json.dumps(summary)[:3000]
    [finished] = [e for e in events if e["type"] == "step.finished"]
    assert finished["payload"]["result"] == 42
