"""`noetl ui`: the console and the API over the SQLite file `noetl run` writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import EXAMPLES, ROOT
from tests.distributed.cluster import Cluster, free_port, wait_until
from tests.helpers.auth import token_in_database
from tests.helpers.cli import noetl


def test_noetl_ui_serves_the_console_over_the_embedded_database(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    ran = noetl("run", str(EXAMPLES / "hello_world.yaml"), "--db", str(db), "--json")
    assert ran.returncode == 0, ran.stderr
    execution_id = json.loads(ran.stdout)["execution_id"]

    cluster = Cluster(db=str(db), workdir=tmp_path, port=free_port())
    cluster.token = token_in_database(str(db))
    proc = cluster._spawn("ui", "ui", "--db", str(db), "--port", str(cluster.port))
    try:
        wait_until(lambda: cluster._healthy(cluster.port), 30, "noetl ui")
        page = httpx.get(f"{cluster.url}/ui/", timeout=10)  # the page itself is public
        assert page.status_code == 200
        assert '<script type="module" src="js/app.js">' in page.text
        assert httpx.get(f"{cluster.url}/api/executions", timeout=10).status_code == 401
        listed = httpx.get(
            f"{cluster.url}/api/executions", headers=cluster.headers, timeout=10
        ).json()["items"]
        assert [i["execution_id"] for i in listed] == [execution_id]
        graph = httpx.get(
            f"{cluster.url}/api/executions/{execution_id}/graph",
            headers=cluster.headers,
            timeout=10,
        )
        assert {n["status"] for n in graph.json()["nodes"]} == {"ok"}
    finally:
        assert proc.stop() == 0
    log = proc.output()
    assert f"console: http://127.0.0.1:{cluster.port}/ui/" in log
    assert f"noetl worker start --db {db}" in log
    assert f"noetl auth token create --role admin --db {db}" in log
    assert "noetl ui stopped" in log


def test_noetl_ui_says_when_the_database_does_not_exist_yet(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"  # its directory exists: --db into a missing one is refused
    cluster = Cluster(db=str(db), workdir=tmp_path, port=free_port())
    proc = cluster._spawn("ui", "ui", "--db", str(db), "--port", str(cluster.port), "--no-auth")
    try:
        wait_until(lambda: cluster._healthy(cluster.port), 30, "noetl ui")
        assert httpx.get(f"{cluster.url}/api/executions", timeout=10).json()["items"] == []
    finally:
        proc.stop()
    assert f"note: {db} does not exist yet" in proc.output()


def test_noetl_ui_help_names_its_options() -> None:
    shown = noetl("ui", "--help")
    assert shown.returncode == 0
    for option in ("--db", "--port", "--host", "NOETL_UI_PORT", "noetl worker start"):
        assert option in shown.stdout, option


WAITS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: waits}
workload: {gate: ""}
workflow:
  - step: wait
    tool:
      kind: python
      timeout_ms: 60000
      code: |
        import os, time
        def main(context, args):
            deadline = time.time() + 50
            while not os.path.exists(args["gate"]) and time.time() < deadline:
                time.sleep(0.05)
            return "opened"
      args: {gate: "{{ workload.gate }}"}
"""


def test_canceling_from_the_console_a_run_still_in_progress(tmp_path: Path) -> None:
    # `noetl run` owns its execution in memory; a cancel from the console over the same
    # file is decided by the console's orchestrator, so the run's next write finds the
    # log moved on: it stops with a clear message, and the execution stays canceled.
    db, gate = tmp_path / "runs.db", tmp_path / "gate"
    playbook = tmp_path / "waits.yaml"
    playbook.write_text(WAITS, encoding="utf-8")
    cluster = Cluster(db=str(db), workdir=tmp_path, port=free_port())
    cluster.token = token_in_database(str(db))
    ui = cluster._spawn("ui", "ui", "--db", str(db), "--port", str(cluster.port))
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "noetl",
            "run",
            str(playbook),
            "--db",
            str(db),
            "--json",
            "--set",
            f"gate={gate}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: cluster._healthy(cluster.port), 30, "noetl ui")
        running: list[dict[str, str]] = []

        def started() -> bool:
            url = f"{cluster.url}/api/executions"
            running[:] = httpx.get(
                url, params={"status": "running"}, headers=cluster.headers, timeout=10
            ).json()["items"]
            return bool(running)

        wait_until(started, 30, "the run to start")
        execution_id = running[0]["execution_id"]
        canceled = httpx.post(
            f"{cluster.url}/api/executions/{execution_id}/cancel",
            headers=cluster.headers,
            timeout=10,
        )
        assert canceled.json()["canceled"] is True
        wait_until(
            lambda: cluster.execution(execution_id)["status"] == "canceled", 30, "the cancel"
        )
        gate.touch()
        _, stderr = run.communicate(timeout=60)
        assert run.returncode == 1, stderr
        assert "changed by another process (canceled from the console?)" in stderr
        assert cluster.execution(execution_id)["status"] == "canceled"
    finally:
        gate.touch()
        if run.poll() is None:
            run.kill()
            run.wait(timeout=10)
        ui.stop()
