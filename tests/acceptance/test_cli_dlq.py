"""`noetl dlq` end to end on the SQLite file `noetl run` writes: list, show, replay (with a
patch, twice), discard; the real CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

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


def noetl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "noetl", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


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
