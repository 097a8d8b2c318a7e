"""`noetl schedule create --nats-subject` against `noetl ui` on a SQLite file, as real
processes with the real NATS JetStream: each message published starts one execution
(a worker runs it) with the message's body, and `schedule list` names the subject."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl.bus.subscriptions import stream_name
from tests.distributed.cluster import Cluster, free_port, wait_until
from tests.helpers.auth import token_in_database
from tests.helpers.cli import noetl
from tests.helpers.nats import delete_stream, publish

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: orders, path: jobs/orders}
workload: {n: null}
workflow:
  - step: start
    tool: {kind: noop, args: {n: "{{ workload.n }}"}}
"""


@pytest.fixture
def subject(nats_url: str) -> Iterator[str]:
    name = f"noetl_test_{uuid.uuid4().hex[:12]}.orders"
    yield name
    delete_stream(nats_url, stream_name(name))


def test_a_schedule_made_on_a_subject_starts_a_run_per_message(
    tmp_path: Path, nats_url: str, subject: str
) -> None:
    db = tmp_path / "noetl.db"
    cluster = Cluster(db=str(db), workdir=tmp_path, port=free_port())
    cluster.token = token_in_database(str(db))
    cluster.env.update({"NOETL_SCHEDULER_POLL_S": "0.2", "NOETL_TRIGGERS_NATS_URL": nats_url})
    ui = cluster._spawn("ui", "ui", "--db", str(db), "--port", str(cluster.port))
    cluster.start_worker("worker")
    env = {"NOETL_SERVER_URL": cluster.url, "NOETL_API_TOKEN": cluster.token}
    try:
        wait_until(lambda: cluster._healthy(cluster.port), 30, "noetl ui")
        (tmp_path / "orders.yaml").write_text(PLAYBOOK, encoding="utf-8")
        registered = noetl("playbook", "register", tmp_path / "orders.yaml", env=env)
        assert registered.returncode == 0, registered.stderr
        made = noetl(
            "schedule", "create", "orders", "--playbook", "jobs/orders",
            "--nats-subject", subject, env=env,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        wait_until(lambda: "consuming" in ui.output(), 30, "the consumer")
        publish(nats_url, subject, [json.dumps({"n": n}).encode() for n in range(3)])

        def started() -> list[str]:
            with sqlite3.connect(db) as conn:
                rows = conn.execute(
                    "SELECT execution_id FROM schedule_tick WHERE status = 'started'"
                ).fetchall()
            return [str(row[0]) for row in rows]

        wait_until(lambda: len(started()) == 3, 30, "three executions")
        for execution_id in started():
            assert cluster.wait_finished(execution_id, timeout=30)["status"] == "ok"
        assert len(set(started())) == 3
        table = noetl("schedule", "list", env=env).stdout
        assert "nats" in table and "started" in table, table
        (item,) = json.loads(noetl("schedule", "list", "--json", env=env).stdout)["items"]
        assert item["trigger"]["nats"] == {"subject": subject}
        assert item["last_tick"]["status"] == "started"
    finally:
        cluster.stop_all()
