"""The configuration through the real CLI: `noetl config show`, bad settings refused at
start-up (exit 3), and settings that change what `noetl run` does (retries, failure
policies, default timeouts)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from noetl.store import open_store
from tests.helpers import cli


def noetl(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The CLI without a config file named by the environment; never a traceback."""
    return cli.noetl(*args, env=env, drop=["NOETL_CONFIG"], timeout=timeout, no_traceback=True)


def run_json(
    playbook: Path, db: Path, env: dict[str, str], *extra: str
) -> tuple[int, dict[str, Any]]:
    proc = noetl("run", str(playbook), "--json", "--db", str(db), *extra, env=env)
    return proc.returncode, json.loads(proc.stdout)


def events(db: Path, execution_id: str, step: str) -> list[tuple[str, dict[str, Any]]]:
    store = open_store(str(db))
    try:
        return [(e.type, e.payload) for e in store.load_events(execution_id) if e.step == step]
    finally:
        store.close()


# --- noetl config show -------------------------------------------------------------------


def test_config_show_prints_the_defaults_as_yaml() -> None:
    proc = noetl("config", "show")
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load(proc.stdout)
    assert data["retries"]["plugin"]["max_attempts"] == 6
    assert data["retries"]["sink"]["max_attempts"] == 8
    assert data["policies"]["on_step_fail"] == "halt"
    assert "max_attempts: 6  # default" in proc.stdout


def test_config_show_with_a_file_and_the_environment_masks_secrets(tmp_path: Path) -> None:
    config = tmp_path / "noetl.yaml"
    config.write_text(
        "retries:\n  plugin:\n    max_attempts: 4\n"
        "tracing:\n  endpoint: 'https://otel:hunter2@collector:4318'\n",
        encoding="utf-8",
    )
    env = {
        "NOETL_DB": "postgresql://noetl:s3cret@db.internal:5432/noetl",
        "NOETL_POLICIES_ON_STEP_FAIL": "continue",
    }
    proc = noetl("config", "show", "--config", str(config), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "hunter2" not in proc.stdout and "s3cret" not in proc.stdout
    out = json.loads(proc.stdout)
    assert out["config"]["retries"]["plugin"]["max_attempts"] == 4
    assert out["config"]["db"]["url"] == "postgresql://noetl:***@db.internal:5432/noetl"
    assert out["config"]["tracing"]["endpoint"] == "https://otel:***@collector:4318"
    assert out["sources"]["retries.plugin.max_attempts"] == f"file {config}:3"
    assert out["sources"]["policies.on_step_fail"] == "env NOETL_POLICIES_ON_STEP_FAIL"
    assert out["sources"]["db.url"] == "env NOETL_DB"

    yaml_out = noetl("config", "show", env={**env, "NOETL_CONFIG": str(config)})
    assert f"max_attempts: 4  # file {config}:3" in yaml_out.stdout
    assert "hunter2" not in yaml_out.stdout and "s3cret" not in yaml_out.stdout


def test_a_bad_configuration_exits_3_naming_the_file_line_and_key(tmp_path: Path) -> None:
    config = tmp_path / "noetl.yaml"
    config.write_text("retries:\n  plugin:\n    max_attempts: 0\n", encoding="utf-8")
    proc = noetl("config", "show", "--config", str(config))
    assert proc.returncode == 3
    assert proc.stderr == (
        f"error: {config}:3: retries.plugin.max_attempts = 0: "
        "input should be greater than or equal to 1\n"
    )


def test_every_command_refuses_a_bad_setting_at_start_up(tmp_path: Path) -> None:
    env = {"NOETL_DB": "mysql://ada:hunter2@db/x", "NOETL_WORKER_LEASE_S": "never"}
    for command in (
        ["run", "examples/hello_world.yaml"],
        ["worker", "start"],
        ["server", "start"],
        ["db", "status"],
        ["validate", "examples/hello_world.yaml"],
    ):
        proc = noetl(*command, env=env, timeout=60)
        assert proc.returncode == 3, (command, proc.stderr)
        assert proc.stderr.splitlines() == [
            "error: invalid configuration:",
            "  NOETL_DB: db.url: unknown scheme 'mysql'; expected a file path, sqlite:///path, "
            "memory:// or postgresql://user:password@host:port/database",
            "  NOETL_WORKER_LEASE_S: worker.lease_s = 'never': input should be a valid number, "
            "unable to parse string as a number",
        ], command
        assert "hunter2" not in proc.stderr


# --- settings that change a run ----------------------------------------------------------

FLAKY = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: flaky
workload:
  marker: ""
workflow:
  - step: start
    tool:
      kind: python
      spec:
        code: |
          import pathlib

          def main(context, args):
              marker = pathlib.Path(args["marker"])
              calls = int(marker.read_text()) + 1 if marker.exists() else 1
              marker.write_text(str(calls))
              if calls == 1:
                  raise TimeoutError("the first call times out")
              return {"calls": calls}
      args:
        marker: "{{ workload.marker }}"
    result:
      as: answer
"""


def test_retries_plugin_max_attempts_decides_whether_a_transient_failure_is_retried(
    tmp_path: Path,
) -> None:
    playbook = tmp_path / "flaky.yaml"
    playbook.write_text(FLAKY, encoding="utf-8")
    fast = {"NOETL_RETRIES_PLUGIN_BASE_MS": "10"}

    once = {**fast, "NOETL_RETRIES_PLUGIN_MAX_ATTEMPTS": "1"}
    db = tmp_path / "once.db"
    code, out = run_json(playbook, db, once, "--set", f"marker={tmp_path / 'once'}")
    assert code == 1
    assert out["steps"]["start"]["status"] == "failed"
    [exhausted] = [p for t, p in events(db, out["execution_id"], "start") if t == "retry.processed"]
    assert (exhausted["attempts"], exhausted["max_attempts"]) == (1, 1)

    twice = {**fast, "NOETL_RETRIES_PLUGIN_MAX_ATTEMPTS": "2"}
    db = tmp_path / "twice.db"
    code, out = run_json(playbook, db, twice, "--set", f"marker={tmp_path / 'twice'}")
    assert code == 0, out
    assert out["context"]["answer"] == {"calls": 2}
    [retry] = [p for t, p in events(db, out["execution_id"], "start") if t == "retry.started"]
    assert (retry["attempt"], retry["max_attempts"], retry["reason"]) == (2, 2, "transient")
    assert retry["error_type"] == "TimeoutError"


BRANCHES = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: branches
workflow:
  - step: start
    next: [broken, fine]
  - step: broken
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              raise ValueError("broken on purpose")
  - step: fine
    tool: noop
"""


def test_policies_on_step_fail_continue_changes_the_outcome(tmp_path: Path) -> None:
    playbook = tmp_path / "branches.yaml"
    playbook.write_text(BRANCHES, encoding="utf-8")

    code, out = run_json(playbook, tmp_path / "halt.db", {})
    assert code == 1
    assert out["status"] == "fail"

    env = {"NOETL_POLICIES_ON_STEP_FAIL": "continue"}
    code, out = run_json(playbook, tmp_path / "continue.db", env)
    assert code == 0, out
    assert out["status"] == "ok"
    assert out["steps"]["broken"]["status"] == "failed"
    assert out["steps"]["fine"]["status"] == "ok"

    # The same from a configuration file, and a playbook's own policy still wins.
    config = tmp_path / "noetl.yaml"
    config.write_text("policies:\n  on_step_fail: continue\n", encoding="utf-8")
    code, out = run_json(playbook, tmp_path / "file.db", {}, "--config", str(config))
    assert (code, out["status"]) == (0, "ok")
    own = tmp_path / "own.yaml"
    own.write_text(BRANCHES.replace("workflow:", "policy:\n  on_step_fail: halt\nworkflow:"))
    code, out = run_json(own, tmp_path / "own.db", env)
    assert (code, out["status"]) == (1, "fail")


SLOW = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: slow
workflow:
  - step: start
    tool:
      kind: python
      spec:
        code: |
          import time

          def main(context, args):
              time.sleep(60)
"""


def test_timeouts_tool_default_ms_reaches_a_task_without_a_timeout(tmp_path: Path) -> None:
    playbook = tmp_path / "slow.yaml"
    playbook.write_text(SLOW, encoding="utf-8")
    env = {"NOETL_TIMEOUTS_TOOL_DEFAULT_MS": "300", "NOETL_RETRIES_PLUGIN_MAX_ATTEMPTS": "1"}
    db = tmp_path / "slow.db"
    code, out = run_json(playbook, db, env)
    assert code == 1
    assert out["duration_s"] < 30
    logged = events(db, out["execution_id"], "start")
    [started] = [p for t, p in logged if t == "step.started"]
    assert started["task"]["timeout_ms"] == 300
    [outcome] = [p for t, p in logged if t == "tool.processed"]
    assert outcome["error_type"] == "TimeoutError"
    assert "300 ms" in outcome["error"]


def test_a_flag_wins_over_the_environment_and_the_file(tmp_path: Path) -> None:
    config = tmp_path / "noetl.yaml"
    config.write_text(f"db:\n  url: {tmp_path / 'file.db'}\n", encoding="utf-8")
    env = {"NOETL_CONFIG": str(config)}
    assert f"database: {tmp_path / 'file.db'}" in noetl("db", "status", env=env).stdout
    env["NOETL_DB"] = str(tmp_path / "env.db")
    assert f"database: {tmp_path / 'env.db'}" in noetl("db", "status", env=env).stdout
    flagged = noetl("db", "status", "--db", str(tmp_path / "flag.db"), env=env)
    assert f"database: {tmp_path / 'flag.db'}" in flagged.stdout
