"""`noetl exec` on the database `noetl run` writes, without a server: list (with its
filters), status (and its exit codes), events and cancel. The real CLI in subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.helpers.cli import cli_env, noetl

OK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fine, path: local/fine}
workflow:
  - step: start
    tool: {kind: python, code: "def main(context, args):\\n    return 1\\n"}
"""
FAILS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fails}
workflow:
  - step: start
    tool: {kind: python, code: "def main(context, args):\\n    raise ValueError('no')\\n"}
"""
SLOW = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slow}
workflow:
  - step: start
    tool: {kind: python, code: "import time\\ndef main(context, args):\\n    time.sleep(60)\\n"}
"""


def run(tmp_path: Path, db: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    proc = noetl("run", path, "--db", db, "--json", clean_env=True)
    return str(json.loads(proc.stdout)["execution_id"])


def test_list_status_and_events_on_the_local_database(tmp_path: Path) -> None:
    db = tmp_path / "noetl.db"
    fine, fails = run(tmp_path, db, "fine", OK), run(tmp_path, db, "fails", FAILS)

    listed = noetl("exec", "list", "--db", db, "--json", clean_env=True)
    assert listed.returncode == 0, listed.stderr
    assert [i["execution_id"] for i in json.loads(listed.stdout)["items"]] == [fails, fine]
    by_status = noetl("exec", "list", "--db", db, "--status", "fail", clean_env=True)
    assert by_status.stdout.split()[0:2] == [fails, "fail"]
    by_playbook = noetl("exec", "list", "--db", db, "--playbook", "fine", clean_env=True)
    assert by_playbook.stdout.split()[0] == fine and fails not in by_playbook.stdout
    future = noetl("exec", "list", "--db", db, "--since", "2999-01-01T00:00", clean_env=True)
    assert future.returncode == 0 and future.stdout == ""

    ok_status = noetl("exec", "status", "--id", fine, "--db", db, clean_env=True)
    assert ok_status.returncode == 0 and f"execution {fine} finished: ok" in ok_status.stdout
    failed = noetl("exec", "status", "--id", fails, "--db", db, clean_env=True)
    assert failed.returncode == 1 and "ValueError: no" in failed.stdout
    events = noetl("exec", "events", "--id", fails, "--db", db, "--json", clean_env=True)
    types = [e["type"] for e in json.loads(events.stdout)["items"]]
    assert types[0] == "workflow.started" and types[-1] == "workflow.finished"
    missing = noetl("exec", "status", "--id", "42", "--db", db, clean_env=True)
    assert missing.returncode == 1 and "execution 42 not found" in missing.stderr


def test_the_default_database_is_the_one_noetl_run_writes(tmp_path: Path) -> None:
    path = tmp_path / "fine.yaml"
    path.write_text(OK, encoding="utf-8")
    ran = noetl("run", path, "--json", cwd=tmp_path, clean_env=True)
    execution_id = json.loads(ran.stdout)["execution_id"]
    status = noetl("exec", "status", "--id", execution_id, cwd=tmp_path, clean_env=True)
    assert status.returncode == 0, status.stderr
    assert f"execution {execution_id} finished: ok" in status.stdout


def test_cancel_on_the_local_database_stops_the_run(tmp_path: Path) -> None:
    db = tmp_path / "noetl.db"
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW, encoding="utf-8")
    env = cli_env({"PYTHONPATH": str(ROOT)}, clean_env=True)
    running = subprocess.Popen(
        [sys.executable, "-m", "noetl", "run", str(path), "--db", str(db), "--json"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        execution_id = ""
        deadline = time.monotonic() + 30
        while not execution_id and time.monotonic() < deadline:
            listed = noetl("exec", "list", "--db", db, "--status", "running", "--json",
                           clean_env=True)  # fmt: skip
            items = json.loads(listed.stdout or '{"items": []}')["items"]
            execution_id = items[0]["execution_id"] if items else ""
            time.sleep(0.2)
        assert execution_id, "the run never showed as running"
        canceled = noetl("exec", "cancel", "--id", execution_id, "--db", db, clean_env=True)
        assert canceled.returncode == 0, canceled.stderr
        assert f"cancel requested for execution {execution_id}" in canceled.stdout
        # The run sees the cancel within seconds (it reads its status from the database
        # every second), not when its tool's 30 s timeout ends the task.
        _, err = running.communicate(timeout=15)
        assert running.returncode == 1, err
        status = noetl("exec", "status", "--id", execution_id, "--db", db, "--json",
                       clean_env=True)  # fmt: skip
        assert json.loads(status.stdout)["status"] == "canceled"
        assert status.returncode == 1
    finally:
        running.kill()
