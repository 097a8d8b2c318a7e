"""`noetl dlq` end to end on the SQLite file `noetl run` writes: list, show, replay (with a
patch, twice), discard; the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT
from tests.helpers.cli import noetl

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: divide}
workload: {password: hunter2}
workflow:
  - step: start
    tool: {kind: python, code: "def main(context, args):\\n    return 1\\n"}
    result: {as: one}
    next: divide
  - step: divide
    tool:
      kind: python
      code: |
        def main(context, args):
            return 10 / args["d"]
      args: {d: 0}
    result: {as: q}
    next: done
  - step: done
    tool:
      kind: python
      code: "def main(context, args):\\n    return args['q'] + args['one']\\n"
      args: {q: "{{ q }}", one: "{{ one }}"}
    result: {as: total}
"""


def failed_run(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "divide.yaml"
    path.write_text(PLAYBOOK, encoding="utf-8")
    db = tmp_path / "noetl.db"
    proc = noetl("run", str(path), "--db", str(db), "--json")
    assert proc.returncode == 1, proc.stderr
    return db, json.loads(proc.stdout)["execution_id"]


def dlq(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return noetl("dlq", *args, "--db", str(db))


def dlq_json(db: Path, *args: str) -> Any:
    proc = dlq(db, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_list_show_replay_with_a_patch_then_replay_again(tmp_path: Path) -> None:
    db, execution_id = failed_run(tmp_path)
    message_id = f"{execution_id}.divide"

    listed = dlq(db, "list")
    assert listed.returncode == 0, listed.stderr
    assert f"{message_id} | divide | python | failed | 1 attempts | pending" in listed.stdout
    assert "(1 pending, 0 replayed, 0 discarded)" in listed.stdout

    shown = dlq_json(db, "show", message_id)
    assert shown["last_error"] == "ZeroDivisionError: division by zero"
    assert shown["payload"]["args"] == {"d": 0}
    assert '"password":"***"' in shown["context_excerpt"]
    assert "hunter2" not in json.dumps(shown)

    replayed = dlq(db, "replay", message_id, "--patch", "args.d=2")
    assert replayed.returncode == 0, replayed.stderr
    assert f"replayed {message_id}: execution {execution_id} continues" in replayed.stdout
    assert f"execution {execution_id} ok" in replayed.stdout

    again = dlq(db, "replay", message_id, "--no-wait")
    assert again.returncode == 0, again.stderr
    assert "was replayed already; nothing to do" in again.stdout
    entries = dlq_json(db, "list", "--status", "all")["items"]
    assert [(e["message_id"], e["status"], e["replays"]) for e in entries] == [
        (message_id, "replayed", 1)
    ]
    discard = dlq(db, "discard", message_id, "--reason", "too late")
    assert discard.returncode == 1
    assert "only a pending entry can be discarded" in discard.stderr


def test_discard_then_a_replay_is_refused(tmp_path: Path) -> None:
    db, execution_id = failed_run(tmp_path)
    message_id = f"{execution_id}.divide"
    discarded = dlq_json(db, "discard", message_id, "--reason", "bad input data")
    assert (discarded["status"], discarded["discard_reason"]) == ("discarded", "bad input data")
    refused = dlq(db, "replay", message_id)
    assert refused.returncode == 1
    assert "was discarded: bad input data" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_bad_patches_and_unknown_entries_are_clear_errors(tmp_path: Path) -> None:
    db, _ = failed_run(tmp_path)
    bad = dlq(db, "replay", "whatever", "--patch", "kind=http")
    assert bad.returncode == 2
    assert "cannot patch 'kind'" in bad.stderr
    missing = dlq(db, "show", "nope")
    assert missing.returncode == 1
    assert "no dead-letter entry nope" in missing.stderr


def test_without_a_server_the_error_says_where_it_looked() -> None:
    proc = noetl("dlq", "list", "--server", "http://127.0.0.1:9")
    assert proc.returncode == 3
    assert "cannot connect to the NoETL server at http://127.0.0.1:9" in proc.stderr


OTHER = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: other}
workflow:
  - step: start
    tool: {kind: python, code: "def main(context, args):\\n    return 1\\n"}
"""


def test_a_replay_here_leaves_other_executions_tasks_in_the_queue(tmp_path: Path) -> None:
    from noetl.runtime.orchestrator import Orchestrator
    from noetl.store.sqlite import SqliteStore

    db, execution_id = failed_run(tmp_path)
    store = SqliteStore(db)
    try:  # queued for a worker (as `noetl ui` queues what it starts): not this command's
        other = Orchestrator(store, owner="test").start_execution(OTHER)
    finally:
        store.close()

    replayed = dlq(db, "replay", f"{execution_id}.divide", "--patch", "args.d=2")

    assert replayed.returncode == 0, replayed.stderr
    assert f"execution {execution_id} ok" in replayed.stdout
    store = SqliteStore(db)
    try:
        row = store.get_task(f"{other}.start")
        assert row is not None
        assert (row["status"], row["lease_token"], row["worker_id"]) == ("queued", 0, None)
    finally:
        store.close()


SLOW = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slow}
workflow:
  - step: slow
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            time.sleep(args["s"])
            return 10 / args["d"]
      args: {s: 0, d: 0}
"""


def test_a_replay_stopped_twice_gives_its_running_task_back_to_the_queue(
    tmp_path: Path,
) -> None:
    import signal
    import time

    from noetl.store.sqlite import SqliteStore

    path = tmp_path / "slow.yaml"
    path.write_text(SLOW, encoding="utf-8")
    db = tmp_path / "noetl.db"
    ran = noetl("run", str(path), "--db", str(db), "--json")
    assert ran.returncode == 1, ran.stderr
    execution_id = json.loads(ran.stdout)["execution_id"]
    task_id = f"{execution_id}.slow"
    args = ["replay", task_id, "--patch", "args.s=60", "--patch", "args.d=1", "--db", str(db)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "noetl", "dlq", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    store = SqliteStore(db)
    try:
        deadline = time.monotonic() + 60
        while True:  # until this process holds the task and its code is running
            row = store.get_task(task_id)
            if row is not None and row["status"] == "leased":
                break
            assert time.monotonic() < deadline, "the replayed task was never claimed"
            time.sleep(0.05)
        time.sleep(1.0)
        token = row["lease_token"]
        os.kill(proc.pid, signal.SIGINT)  # finish the running task...
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGINT)  # ...no: give it back now
        _, err = proc.communicate(timeout=30)

        assert proc.returncode == 130, err
        assert "finishing the tasks running here" in err
        row = store.get_task(task_id)
        assert row is not None
        # back in the queue as it was, for the next worker; not failed, not expired
        assert (row["status"], row["attempt"], row["worker_id"]) == ("queued", 1, None)
        assert row["lease_token"] == token
        events = store.load_events(execution_id)
        replayed = max(e.seq for e in events if e.type == "task.replayed")
        assert [e.type for e in events if e.seq > replayed] == []  # no outcome recorded
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        store.close()


PARENT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent}
workflow:
  - step: divide
    tool:
      kind: python
      code: "def main(context, args):\\n    return 10 / args['d']\\n"
      args: {d: 0}
    next: call
  - step: call
    tool: {kind: playbook, path: child.yaml}
    result: {as: kid}
"""
CHILD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child}
workflow:
  - step: answer
    tool: {kind: python, code: "def main(context, args):\\n    return 42\\n"}
    result: {as: answer}
"""


def test_a_replay_here_runs_the_child_executions_it_starts(tmp_path: Path) -> None:
    from noetl.store.sqlite import SqliteStore

    (tmp_path / "parent.yaml").write_text(PARENT, encoding="utf-8")
    (tmp_path / "child.yaml").write_text(CHILD, encoding="utf-8")  # under the root: cwd
    db = tmp_path / "noetl.db"

    def here(*args: str) -> subprocess.CompletedProcess[str]:
        return noetl(*args, "--db", db, cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})

    ran = here("run", "parent.yaml", "--json")
    assert ran.returncode == 1, ran.stderr
    execution_id = json.loads(ran.stdout)["execution_id"]

    replayed = here("dlq", "replay", f"{execution_id}.divide", "--patch", "args.d=2", "--json")

    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout)["execution"]["status"] == "ok"
    store = SqliteStore(db)
    try:
        family = store.execution_family(execution_id)
        assert len(family) == 2  # the parent and the child its replay started
        child = store.get_execution(family[1])
        assert child is not None and child.status.value == "ok"
        row = store.get_task(f"{child.execution_id}.answer")
        assert row is not None and str(row["worker_id"]).startswith("local:")
    finally:
        store.close()
