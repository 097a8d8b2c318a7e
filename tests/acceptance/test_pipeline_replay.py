"""A pipeline that failed for good, replayed from the dead-letter queue with `noetl dlq
replay`: the replay resumes at the task that failed; the tasks before it, whose runs
were saved, do not run again. The real CLI in subprocesses, on the SQLite file `noetl
run` writes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.cli import noetl

RECORD = """\
import os
def main(context, args):
    with open(args["out"], "a") as fh:
        fh.write(args["task"] + "\\n")
    if args["needs"] and not os.path.exists(args["needs"]):
        raise ValueError("not yet: " + args["needs"])
    return {"task": args["task"]}
"""


def task(name: str, needs: str = "") -> str:
    return f"""\
          - name: {name}
            tool:
              kind: python
              args: {{out: "{{{{ workload.out }}}}", task: {name}, needs: "{needs}"}}
              spec:
                code: {json.dumps(RECORD)}
"""


def test_a_replayed_pipeline_resumes_at_the_task_that_failed(tmp_path: Path) -> None:
    out, gate = tmp_path / "runs.txt", tmp_path / "gate"
    playbook = tmp_path / "replay.yaml"
    playbook.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: replay}\n"
        f"workload: {{out: {json.dumps(str(out))}}}\n"
        "workflow:\n  - step: start\n    tool:\n      kind: pipeline\n      spec:\n"
        "        tasks:\n" + task("first") + task("fragile", str(gate)) + task("last"),
        encoding="utf-8",
    )
    db = tmp_path / "noetl.db"
    failed = noetl("run", str(playbook), "--db", str(db), "--json")
    assert failed.returncode == 1, failed.stderr
    execution_id = json.loads(failed.stdout)["execution_id"]
    assert out.read_text().split() == ["first", "fragile"]

    gate.write_text("open")
    replayed = noetl("dlq", "replay", f"{execution_id}.start", "--db", str(db))
    assert replayed.returncode == 0, replayed.stderr
    assert f"execution {execution_id} ok" in replayed.stdout
    assert out.read_text().split() == ["first", "fragile", "fragile", "last"]
