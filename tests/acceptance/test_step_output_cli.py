"""What steps print, seen by a person: `noetl run` prints it as it comes (prefixed with
step, item and attempt; `--quiet` hides it), `noetl exec logs` prints it again from the
database (`--step`, `--json`, `--follow`), and the API answers it. The real CLI in
subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ROOT
from tests.helpers.cli import cli_env, noetl

PRINTS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: prints}
workload: {fail_once: true}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import logging, sys
        def main(context, args):
            print("starting up")
            print("to stderr", file=sys.stderr)
            logging.getLogger("etl").warning("careful")
            return 1
    next: [items]
  - step: items
    loop: {in: [10, 20], iterator: n}
    tool:
      kind: python
      args: {n: "{{ n }}"}
      code: |
        import os, tempfile
        def main(context, args):
            marker = os.path.join(tempfile.gettempdir(), "noetl-once-" + context["execution_id"])
            print("item", args["n"])
            if args["n"] == 20 and not os.path.exists(marker):
                open(marker, "w").close()
                raise ConnectionError("flaky")
            return args["n"]
    retry: {max_attempts: 2, initial_delay: 0.01}
"""


def run(tmp_path: Path, *flags: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    path = tmp_path / "prints.yaml"
    path.write_text(PRINTS, encoding="utf-8")
    proc = noetl("run", path, "--db", tmp_path / "n.db", "--json", *flags, clean_env=True)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["execution_id"]), proc


def test_run_prints_step_output_prefixed_and_quiet_hides_it(tmp_path: Path) -> None:
    _, proc = run(tmp_path)
    lines = proc.stderr.splitlines()
    for expected in (
        "[start] starting up",
        "[start] to stderr",
        "[start] WARNING etl: careful",
        "[items#0] item 10",
        "[items#1] item 20",
        "[items#1 attempt 2] item 20",
    ):
        assert expected in lines, proc.stderr
    assert lines.index("[items#1] item 20") < lines.index("[items#1 attempt 2] item 20")

    _, quiet = run(tmp_path, "--quiet")
    assert "starting up" not in quiet.stderr and "item 10" not in quiet.stderr


def test_exec_logs_reads_them_back_from_the_database(tmp_path: Path) -> None:
    execution_id, _ = run(tmp_path, "--quiet")
    db = tmp_path / "n.db"
    logs = noetl("exec", "logs", execution_id, "--db", db, clean_env=True)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == [
        "[start] starting up",
        "[start] to stderr",
        "[start] WARNING etl: careful",
        "[items#0] item 10",
        "[items#1] item 20",
        "[items#1 attempt 2] item 20",
    ]
    one = noetl("exec", "logs", "--id", execution_id, "--step", "items", "--json", "--db", db)
    entries = [json.loads(line) for line in one.stdout.splitlines()]
    assert [(e["index"], e["attempt"], e["ok"]) for e in entries] == [
        (0, 1, True),
        (1, 1, False),
        (1, 2, True),
    ]
    assert entries[1]["text"] == "item 20\n"
    missing = noetl("exec", "logs", "nope", "--db", db, clean_env=True)
    assert missing.returncode != 0 and "nope" in missing.stderr


SLOW = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slowly}
workflow:
  - step: first
    tool: {kind: python, code: "def main(context, args):\\n    print('one')\\n    return 1\\n"}
    next: [second]
  - step: second
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            time.sleep(2)
            print("two")
            return 2
"""


def test_exec_logs_follow_prints_until_the_execution_ends(tmp_path: Path) -> None:
    path, db = tmp_path / "slow.yaml", tmp_path / "n.db"
    path.write_text(SLOW, encoding="utf-8")
    runner = subprocess.Popen(
        [sys.executable, "-m", "noetl", "run", path, "--db", db, "--quiet", "--json"],
        cwd=ROOT,
        env=cli_env(clean_env=True),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        execution_id = ""
        deadline = time.monotonic() + 60
        while not execution_id and time.monotonic() < deadline:
            listed = noetl("exec", "list", "--db", db, "--json", clean_env=True)
            items = json.loads(listed.stdout)["items"] if listed.returncode == 0 else []
            execution_id = items[0]["execution_id"] if items else ""
            time.sleep(0.1)
        assert execution_id, "the run did not start"
        follow = noetl(
            "exec", "logs", execution_id, "--follow", "--interval", "0.2", "--db", db,
            clean_env=True,
        )  # fmt: skip
        assert follow.returncode == 0, follow.stderr
        assert follow.stdout.splitlines() == ["[first] one", "[second] two"]
    finally:
        out, err = runner.communicate(timeout=60)
    assert json.loads(out)["status"] == "ok", err


def test_the_api_answers_the_logs_and_each_attempts_output(tmp_path: Path) -> None:
    from noetl.cli.client import ApiError
    from noetl.cli.local_api import local_client

    execution_id, _ = run(tmp_path, "--quiet")
    url = f"/api/executions/{execution_id}"
    with local_client(str(tmp_path / "n.db")) as client:
        answer = client.get(f"{url}/logs")
        assert answer["status"] == "ok"
        assert [(i["step"], i["index"], i["attempt"]) for i in answer["items"]] == [
            ("start", None, 1),
            ("items", 0, 1),
            ("items", 1, 1),
            ("items", 1, 2),
        ]
        later = client.get(f"{url}/logs", after_seq=answer["last_seq"])
        assert later["items"] == [] and later["last_seq"] == answer["last_seq"]
        first = answer["items"][0]["seq"]
        rest = client.get(f"{url}/logs", after_seq=first, step="items")
        assert [i["attempt"] for i in rest["items"]] == [1, 1, 2]
        paged = client.get(f"{url}/logs", limit=2)
        assert len(paged["items"]) == 2 and paged["last_seq"] == paged["items"][-1]["seq"]
        step = client.get(f"{url}/steps/items")
        assert [a["stdout"] for a in step["attempts"]] == ["item 10\n", "item 20\n", "item 20\n"]
        try:
            client.get("/api/executions/nope/logs")
        except ApiError as exc:
            assert exc.status == 404
        else:
            raise AssertionError("a missing execution answered")
