"""The dead-letter queue in distributed mode: a server and a worker as real processes on
PostgreSQL, a real HTTP server on loopback that is down and then recovers, and the real
`noetl dlq` CLI replaying through the server's API."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from tests.distributed.cluster import ROOT, Cluster
from tests.helpers.cli import noetl
from tests.helpers.flaky_http import Flaky
from tests.integration.test_dlq import playbook

pytestmark = [pytest.mark.services, pytest.mark.slow]


def cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """`noetl dlq ARGS` against `cluster`'s server."""
    return noetl("dlq", *args, "--server", cluster.url, env={"NOETL_API_TOKEN": cluster.token})


def test_replay_through_the_server_completes_the_execution_with_the_same_message_id(
    cluster: Cluster, flaky: Flaky, pg_database: str
) -> None:
    flaky.failures = 100
    cluster.start_server()
    cluster.start_worker("w1")
    execution_id = cluster.start_execution(playbook(flaky.url, attempts=2))
    assert cluster.wait_finished(execution_id)["status"] == "fail"
    message_id = f"{execution_id}.fetch"

    listed = cli(cluster, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)["items"]
    assert (entry["message_id"], entry["reason"], entry["attempts"]) == (message_id, "exhausted", 2)
    with psycopg.connect(pg_database) as conn:
        token_before = conn.execute(
            "SELECT lease_token FROM task_queue WHERE task_id = %s", (message_id,)
        ).fetchone()
    assert token_before is not None

    flaky.failures = 0  # the service recovers
    replayed = cli(cluster, "replay", message_id, "--wait")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert f"execution {execution_id} ok" in replayed.stdout
    again = cli(cluster, "replay", message_id)
    assert "was replayed already" in again.stdout

    result = cluster.execution(execution_id)
    assert result["status"] == "ok"
    assert result["context"]["total"] == {"call": 3}
    shown = json.loads(cli(cluster, "show", message_id, "--json").stdout)
    assert (shown["message_id"], shown["status"], shown["replays"]) == (message_id, "replayed", 1)
    with psycopg.connect(pg_database) as conn:
        rows = conn.execute(
            "SELECT task_id, status, attempt, lease_token FROM task_queue "
            "WHERE execution_id = %s AND step = 'fetch'",
            (execution_id,),
        ).fetchall()
    # one row for the task, the same id, leased once more (its fencing token grew)
    assert [(r[0], r[1], r[2]) for r in rows] == [(message_id, "done", 1)]
    assert rows[0][3] > token_before[0]
    types = [e["type"] for e in cluster.events(execution_id)]
    assert types.count("workflow.reopened") == 1 and types[-1] == "workflow.finished"


def timeline(cluster: Cluster, execution_id: str) -> list[str]:
    """The event types `noetl exec events` prints for step `fetch`, in order."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "noetl",
            "exec",
            "events",
            "--id",
            execution_id,
            "--step",
            "fetch",
            "--server",
            cluster.url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NOETL_API_TOKEN": cluster.token},
    )
    assert proc.returncode == 0, proc.stderr
    return [line.split()[3] for line in proc.stdout.splitlines() if line.strip()]


def test_noetl_exec_events_shows_the_retry_timelines_of_seed_001(
    cluster: Cluster, flaky: Flaky
) -> None:
    cluster.start_server()
    cluster.start_worker("w1")
    flaky.failures = 1  # fails once, then succeeds: the success timeline
    succeeded = cluster.start_execution(playbook(flaky.url, attempts=3))
    assert cluster.wait_finished(succeeded)["status"] == "ok"
    assert timeline(cluster, succeeded) == [
        "step.called",
        "step.started",  # action_started
        "tool.processed",  # action_error
        "retry.started",  # step_retry
        "tool.processed",  # action_completed
        "step.finished",
        "next.evaluated",
    ]
    flaky.calls.clear()
    flaky.failures = 100  # never recovers: the exhausted timeline
    exhausted = cluster.start_execution(playbook(flaky.url, attempts=2))
    assert cluster.wait_finished(exhausted)["status"] == "fail"
    assert timeline(cluster, exhausted) == [
        "step.called",
        "step.started",
        "tool.processed",
        "retry.started",
        "tool.processed",
        "retry.processed",  # step_retry_exhausted
        "task.dead_lettered",
        "step.finished",  # step_failed_terminal
        "next.evaluated",
    ]
