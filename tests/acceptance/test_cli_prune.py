"""`noetl db prune` on the database `noetl run` writes: the real CLI in subprocesses.

A dry run counts and deletes nothing; a prune deletes the history of what finished before
the cutoff, and `exec status` / `exec events` then say when; an execution running during
the prune is never touched and finishes ok."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.acceptance.test_cli_exec_local import FAILS, OK, run
from tests.conftest import ROOT
from tests.helpers.cli import cli_env, noetl

# The long run takes 10 s: well over the prune's cutoff of a second, so it is running
# during both prunes, however slowly each command starts.

LONG = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: long}
workflow:
  - step: first
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            time.sleep(5)
            return 1
    next: [{step: second}]
  - step: second
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            time.sleep(5)
            return 2
"""


def counts(stdout: str) -> dict[str, int]:
    """The per-table lines of the prune's report."""
    found: dict[str, int] = {}
    for line in stdout.splitlines()[1:]:
        table, count, *_ = line.split()
        found[table] = int(count)
    return found


def events_of(db: Path, execution_id: str) -> subprocess.CompletedProcess[str]:
    return noetl("exec", "events", "--id", execution_id, "--db", db, "--json", clean_env=True)


@pytest.mark.slow
def test_dry_run_then_prune_while_an_execution_runs(tmp_path: Path) -> None:
    db = tmp_path / "noetl.db"
    done = run(tmp_path, db, "fine", OK)
    before = json.loads(events_of(db, done).stdout)["items"]
    time.sleep(1.1)  # `done` finished over a second ago
    path = tmp_path / "long.yaml"
    path.write_text(LONG, encoding="utf-8")
    env = cli_env({"PYTHONPATH": str(ROOT)}, clean_env=True)
    running = subprocess.Popen(
        [sys.executable, "-m", "noetl", "run", str(path), "--db", str(db), "--json"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        listed: list[dict[str, str]] = []
        deadline = time.monotonic() + 30
        while not listed and time.monotonic() < deadline:
            proc = noetl("exec", "list", "--db", db, "--status", "running", "--json",
                         clean_env=True)  # fmt: skip
            listed = json.loads(proc.stdout or '{"items": []}')["items"]
            time.sleep(0.2)
        assert listed, "the long run never showed as running"

        dry = noetl("db", "prune", "--older-than", "1s", "--dry-run", "--db", db, clean_env=True)
        assert dry.returncode == 0, dry.stderr
        assert "dry run: would prune 1 execution(s)" in dry.stdout
        dry_counts = counts(dry.stdout)
        assert dry_counts["event_log"] == len(before) and dry_counts["execution_input"] == 1
        assert json.loads(events_of(db, done).stdout)["items"] == before

        pruned = noetl("db", "prune", "--older-than", "1s", "--batch", "1", "--db", db,
                       clean_env=True)  # fmt: skip
        assert pruned.returncode == 0, pruned.stderr
        assert "pruned 1 execution(s) that finished before" in pruned.stdout
        assert "in 1 batch(es)" in pruned.stdout
        assert counts(pruned.stdout) == dry_counts

        out, err = running.communicate(timeout=60)
        assert running.returncode == 0, err
        assert json.loads(out)["status"] == "ok"
    finally:
        running.kill()

    status = noetl("exec", "status", "--id", done, "--db", db, clean_env=True)
    assert status.returncode == 1
    assert f"execution {done} has finished and its history was pruned on" in status.stderr
    events = events_of(db, done)
    assert events.returncode == 1 and "history was pruned on" in events.stderr
    listed_all = noetl("exec", "list", "--db", db, "--json", clean_env=True)
    statuses = {i["execution_id"]: i["status"] for i in json.loads(listed_all.stdout)["items"]}
    assert statuses[done] == "ok"  # the tombstone keeps its status
    pruned_at = {i["execution_id"]: i["pruned_at"] for i in json.loads(listed_all.stdout)["items"]}
    assert pruned_at[done] is not None and list(pruned_at.values()).count(None) == 1
    table = noetl("exec", "list", "--db", db, clean_env=True).stdout.splitlines()
    assert [line.endswith("(history pruned)") for line in table] == [False, True]


def test_a_bad_duration_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "noetl.db"
    proc = noetl("db", "prune", "--older-than", "soon", "--db", db, clean_env=True)
    assert proc.returncode != 0
    assert "is not a duration" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_pending_dead_letter_keeps_its_execution_through_a_prune(tmp_path: Path) -> None:
    """Its replay needs the history: the execution stays whole until an operator settles
    the dead letter, then the next prune takes it."""
    db = tmp_path / "noetl.db"
    failed = run(tmp_path, db, "fails", FAILS)
    listed = noetl("dlq", "list", "--db", db, "--json", clean_env=True)
    (entry,) = json.loads(listed.stdout)["items"]
    time.sleep(1.1)
    held = noetl("db", "prune", "--older-than", "1s", "--db", db, clean_env=True)
    assert held.returncode == 0, held.stderr
    assert ": pruned 0 execution(s)" in held.stdout, held.stdout
    status = noetl("exec", "status", "--id", failed, "--db", db, clean_env=True)
    assert "pruned" not in status.stdout + status.stderr
    assert "fail" in status.stdout

    discard = noetl("dlq", "discard", entry["message_id"], "--reason", "not worth it", "--db", db,
                    clean_env=True)  # fmt: skip
    assert discard.returncode == 0, discard.stderr
    gone = noetl("db", "prune", "--older-than", "1s", "--db", db, clean_env=True)
    assert ": pruned 1 execution(s)" in gone.stdout, gone.stdout
    status = noetl("exec", "status", "--id", failed, "--db", db, clean_env=True)
    assert f"execution {failed} has finished and its history was pruned on" in status.stderr
