"""`noetl schedule` against `noetl ui` on a SQLite file, as real processes: a playbook
registered with a triggers block ticks by itself (a worker runs the executions), and the
commands create, list, pause, resume, run now and delete schedules."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import httpx

from tests.distributed.cluster import Cluster, free_port, wait_until
from tests.helpers.auth import token_in_database
from tests.helpers.cli import noetl

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: ticker, path: jobs/ticker}
workload: {at: null}
triggers:
  - name: fast
    every: 1s
    overlap: allow
    workload: {at: "{{ tick.time }}"}
workflow:
  - step: start
    tool: {kind: noop, args: {at: "{{ workload.at }}"}}
"""


def ticks(db: Path) -> list[tuple[str, int, str]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT schedule, tick_ms, status FROM schedule_tick WHERE manual = 0 ORDER BY tick_ms"
        ).fetchall()
    return [(str(a), int(b), str(c)) for a, b, c in rows]


def test_schedules_on_the_embedded_database(tmp_path: Path) -> None:
    db = tmp_path / "noetl.db"
    cluster = Cluster(db=str(db), workdir=tmp_path, port=free_port())
    cluster.token = token_in_database(str(db))
    cluster.env["NOETL_SCHEDULER_POLL_S"] = "0.2"
    ui = cluster._spawn("ui", "ui", "--db", str(db), "--port", str(cluster.port))
    cluster.start_worker("worker")
    env = {"NOETL_SERVER_URL": cluster.url, "NOETL_API_TOKEN": cluster.token}
    try:
        wait_until(lambda: cluster._healthy(cluster.port), 30, "noetl ui")
        (tmp_path / "ticker.yaml").write_text(PLAYBOOK, encoding="utf-8")
        registered = noetl("playbook", "register", tmp_path / "ticker.yaml", env=env)
        assert registered.returncode == 0, registered.stderr
        wait_until(lambda: len(ticks(db)) >= 3, 30, "three ticks")

        made = noetl(
            "schedule", "create", "nightly", "--playbook", "jobs/ticker",
            "--cron", "30 2 * * *", "--timezone", "Europe/Berlin",
            "--workload", '{"at": "{{ tick.date }}"}', env=env,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert "nightly (active) starts jobs/ticker; next: " in made.stdout
        assert "T02:30:00+0" in made.stdout
        listed = json.loads(noetl("schedule", "list", "--json", env=env).stdout)["items"]
        assert [i["name"] for i in listed] == ["jobs/ticker:fast", "nightly"]
        assert listed[0]["last_tick"]["status"] == "started"

        paused = noetl("schedule", "pause", "jobs/ticker:fast", env=env)
        assert paused.returncode == 0 and "(paused)" in paused.stdout
        count = len(ticks(db))
        time.sleep(2)  # ten polls, two ticks of its time table
        assert len(ticks(db)) <= count + 1  # one may have been claimed as it paused
        ran = noetl("schedule", "run-now", "nightly", env=env)
        assert ran.returncode == 0, ran.stderr
        execution_id = ran.stdout.split()[-1]
        cluster.wait_finished(execution_id, timeout=30)
        assert noetl("schedule", "resume", "jobs/ticker:fast", env=env).returncode == 0
        assert noetl("schedule", "delete", "nightly", env=env).stdout.strip() == "deleted nightly"
        gone = noetl("schedule", "delete", "nightly", env=env)
        assert gone.returncode != 0 and "does not exist" in gone.stderr
        missing = noetl("schedule", "run-now", "nightly", env=env)
        assert missing.returncode != 0

        hook = noetl(
            "schedule", "create", "hook", "--playbook", "jobs/ticker", "--webhook", env=env
        )
        assert hook.returncode == 0, hook.stderr
        token = noetl("schedule", "token", "hook", env=env).stdout.strip()
        assert token.startswith("nwh_")
        started = httpx.post(
            f"{cluster.url}/api/triggers/hook",
            json={"at": "from the hook"},
            headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "k1"},
            timeout=10,
        )
        assert started.status_code == 201, started.text
        done = cluster.wait_finished(started.json()["execution_id"], timeout=30)
        assert done["status"] == "ok"
    finally:
        cluster.stop_all()
    # every tick started once, one after another
    found = ticks(db)
    assert len({t[1] for t in found}) == len(found)
    assert "schedule_tick" in ui.output()
