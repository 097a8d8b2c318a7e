"""`noetl run` logs as JSON lines: the real CLI in a subprocess, every line parsed, the
task context injected, a canary secret nowhere; the flags and their environment twins."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.helpers.cli import noetl

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: logged, path: playbooks/logged}
workflow:
  - step: start
    next: [items]
  - step: items
    loop: {collection: [1, 2, 3], element: n, mode: parallel, key: "k{{ n }}"}
    tool:
      kind: python
      code: |
        import logging
        def main(context, args):
            logging.getLogger("user").warning("token is %s", args["token"])
            if args["n"] == 2:
                raise ValueError("rejected " + args["token"])
            return args["n"]
      args: {n: "{{ n }}", token: "{{ secrets.CANARY }}"}
    result: {collect: {into: all}}
"""


def records(stderr: str) -> list[dict[str, Any]]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    parsed = []
    for line in lines:
        if line.startswith("metrics on http://"):
            continue
        parsed.append(json.loads(line))  # every other line is a JSON object
    return parsed


def test_json_logs_of_a_run_carry_context_and_never_the_secret(tmp_path: Path) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    path = tmp_path / "logged.yaml"
    path.write_text(PLAYBOOK, encoding="utf-8")
    proc = noetl(
        "run",
        str(path),
        "--json",
        "--db",
        str(tmp_path / "db.sqlite"),
        "--log-format",
        "json",
        "--metrics-port",
        "0",
        env={"NOETL_SECRET_CANARY": canary, "NOETL_LOG_LEVEL": "DEBUG"},
    )
    assert proc.returncode == 1, proc.stderr  # item 2 fails, so the loop does
    assert canary not in proc.stdout and canary not in proc.stderr
    assert "metrics on http://127.0.0.1:" in proc.stderr
    logged = records(proc.stderr)
    assert logged
    for record in logged:
        assert {"ts", "level", "logger", "msg"} <= set(record), record
    events = [r.get("event") for r in logged]
    for wanted in (
        "execution_started",
        "step_dispatch",
        "task_enqueue",
        "plugin_start",
        "plugin_done",
        "task_dlq",
        "step_done",
        "execution_finished",
    ):
        assert wanted in events, wanted
    execution_id = json.loads(proc.stdout)["execution_id"]
    starts = [r for r in logged if r.get("event") == "plugin_start"]
    assert len(starts) == 3
    for record in starts:  # injected from the task, not passed by the caller
        assert record["execution_id"] == execution_id
        assert record["step_id"] == "items"
        assert record["call_id"] == f"{execution_id}.items.{record['loop_index']}"
        assert record["loop_key"] == f"k{record['loop_index'] + 1}"
        assert record["spec_signature"] == "{code:str}"
    dlq = next(r for r in logged if r.get("event") == "task_dlq")
    assert (dlq["level"], dlq["error_class"], dlq["workflow_ref"]) == (
        "WARNING",
        "ValueError",
        "playbooks/logged",
    )
    assert "rejected ***" in dlq["error"]
    finished = next(r for r in logged if r.get("event") == "execution_finished")
    assert (finished["execution_id"], finished["status"]) == (execution_id, "fail")


def test_the_default_run_is_quiet_and_the_flags_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "logged.yaml"
    path.write_text(PLAYBOOK, encoding="utf-8")
    env = {"NOETL_SECRET_CANARY": "x" * 8}
    quiet = noetl("run", str(path), "--json", "--db", str(tmp_path / "a.sqlite"), env=env)
    assert quiet.returncode == 1
    # WARNING and up only, as text: the dead letter and the failures, no step chatter
    lines = quiet.stderr.strip().splitlines()
    assert lines and all("WARNING" in line or "ERROR" in line for line in lines), quiet.stderr
    assert any(" task_dlq " in line for line in lines)
    bad = noetl("run", str(path), "--log-format", "xml", env=env)
    assert bad.returncode == 2 and "xml" in bad.stderr
    env_format = noetl(
        "run",
        str(path),
        "--json",
        "--db",
        str(tmp_path / "b.sqlite"),
        env={**env, "NOETL_LOGGING_FORMAT": "json", "NOETL_LOGGING_LEVEL": "INFO"},
    )
    logged = records(env_format.stderr)
    assert {r["level"] for r in logged} <= {"INFO", "WARNING"}
    assert "step_done" in {r.get("event") for r in logged}
