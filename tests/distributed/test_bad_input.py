"""Bad input against real processes on a real PostgreSQL: `noetl server start` and `noetl
worker start` subprocesses, the real CLI. Each test checks that the bad execution fails
clearly (or is refused at the edge) while an unrelated one finishes on time."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.distributed.cluster import Cluster, wait_until
from tests.helpers import cli

pytestmark = [pytest.mark.services, pytest.mark.slow]

LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: hundred}
workflow:
  - step: start
    loop: {collection: "{{ range(100) | list }}", mode: parallel, max_concurrency: 20}
    tool: {kind: noop, args: {n: "{{ item }}"}}
"""

RETURNS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: returns}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        def main(context, args):
            shape = args["shape"]
            if shape == "deep":
                value = "leaf"
                for _ in range(900):
                    value = {"a": value}
                return value
            return "x" * (2 * 1024 * 1024)
      args: {shape: "{{ workload.shape }}"}
"""

# The pick computes an infinity: the engine accepts it, PostgreSQL refuses to store it (JSON
# has no infinity), so the decision of this execution (and only this one) cannot be written.
UNSTORABLE = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: unstorable}
workflow:
  - step: start
    tool: {kind: noop}
    result: {pick: "{{ 1e308 * 10 }}", as: r}
"""

ECHO = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: echo}
workflow:
  - step: start
    loop: {collection: "{{ range(20) | list }}", mode: parallel}
    tool:
      kind: python
      code: |
        def main(context, args):
            return context["workload"]["marker"][:8]
    result: {as: seen}
"""


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"a": value}
    return value


def noetl(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a client of `cluster`'s server."""
    env = {"NOETL_SERVER_URL": cluster.url, "NOETL_API_TOKEN": cluster.token}
    return cli.noetl(*args, env=env)


def post(cluster: Cluster, body: dict[str, Any]) -> httpx.Response:
    """POST /api/executions with `body` (httpx's `json=` or `content=`)."""
    headers = {**cluster.headers, "content-type": "application/json"}
    return httpx.post(f"{cluster.url}/api/executions", headers=headers, timeout=60, **body)


def rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


# --- the edge ----------------------------------------------------------------------------


def test_bad_requests_are_refused_at_the_api_and_the_cli(cluster: Cluster, tmp_path: Path) -> None:
    cluster.start_server()
    for levels in (350, 900):
        response = post(cluster, {"json": {"playbook": LOOP, "workload": {"d": nested(levels)}}})
        assert response.status_code == 422, response.text
        assert "body.workload" in response.json()["message"]
        assert "more than 64 levels deep" in response.json()["message"]
    response = post(cluster, {"json": {"playbook": LOOP, "workload": {"note": "a\u0000b"}}})
    assert response.status_code == 422, response.text
    assert "body.workload" in response.json()["message"]
    assert "NUL character" in response.json()["message"]
    response = post(
        cluster, {"json": {"playbook": LOOP, "options": {"parent_execution_id": "12345"}}}
    )
    assert response.status_code == 422, response.text
    assert "options.parent_execution_id" in response.json()["message"]

    playbook = tmp_path / "loop.yaml"
    playbook.write_text(LOOP, encoding="utf-8")
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps({"d": nested(400)}), encoding="utf-8")
    started = noetl(cluster, "exec", "start", "--workflow", str(playbook), "--workload", str(deep))
    assert started.returncode == 2, started.stderr
    assert "more than 64 levels deep" in started.stderr
    assert "Traceback" not in started.stderr
    ran = noetl(
        cluster, "run", str(playbook), "--workload", str(deep), "--db", str(tmp_path / "run.db")
    )
    assert ran.returncode == 2, ran.stderr
    assert "more than 64 levels deep" in ran.stderr
    listed = httpx.get(f"{cluster.url}/api/executions", headers=cluster.headers, timeout=30)
    assert listed.json()["items"] == []
    assert "Traceback" not in cluster.procs[0].output()


def test_a_body_over_the_limit_is_413_without_the_server_keeping_it(cluster: Cluster) -> None:
    cluster.env["NOETL_SERVER_MAX_BODY_BYTES"] = str(4 * 1024 * 1024)
    server = cluster.start_server()
    big = json.dumps({"playbook": LOOP, "workload": {"blob": "x" * (24 << 20)}}).encode()

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(big), 1 << 20):
            yield big[start : start + (1 << 20)]

    before = rss_mb(server.pid)
    for content in (big, chunks()):
        response = post(cluster, {"content": content})
        assert response.status_code == 413, response.text
        body = response.json()
        assert body["error"] == "too_large" and body["limit"] == 4 * 1024 * 1024
        assert "server.max_body_bytes" in body["message"]
    assert rss_mb(server.pid) - before < 40, "the server kept an oversized body"

    # Accepted bodies near the limit: the server does not keep what each one cost.
    rows = {"rows": [{"id": i, "name": f"n{i}"} for i in range(100_000)]}
    sizes = []
    for _ in range(3):
        response = post(cluster, {"json": {"playbook": LOOP, "workload": rows}})
        assert response.status_code == 201, response.text
        sizes.append(rss_mb(server.pid))
    assert sizes[2] - sizes[0] < 60, f"the server grew with each request: {sizes} MB"
    assert httpx.get(f"{cluster.url}/health", timeout=10).status_code == 200


# --- tool results ------------------------------------------------------------------------


def test_results_too_deep_or_too_big_fail_their_task_and_nothing_else(
    cluster: Cluster,
) -> None:
    cluster.env["NOETL_WORKER_MAX_RESULT_BYTES"] = str(1024 * 1024)
    cluster.start_server()
    cluster.start_worker("w1", concurrency=4)
    bad = {shape: cluster.start_execution(RETURNS, {"shape": shape}) for shape in ("deep", "huge")}
    started = time.monotonic()
    loop = cluster.start_execution(LOOP)
    assert cluster.wait_finished(loop, timeout=30)["status"] == "ok"
    assert time.monotonic() - started < 30
    expected = {
        "deep": "result.a.a.a",
        "huge": "over the limit of 1048576 bytes",
    }
    for shape, execution_id in bad.items():
        result = cluster.wait_finished(execution_id, timeout=30)
        assert result["status"] == "fail", result
        error = result["steps"]["start"]["error"]
        assert "the tool's result was refused" in error and expected[shape] in error, error
    worker = cluster.procs[1].output()
    assert "Traceback" not in worker and "Exception in thread" not in worker


# --- decisions that cannot be written ----------------------------------------------------


def test_an_execution_that_cannot_be_written_fails_alone_and_once(
    cluster: Cluster, pg_database: str
) -> None:
    server = cluster.start_server()
    bad = cluster.start_execution(UNSTORABLE)
    loop = cluster.start_execution(LOOP)
    # Let every outcome wait in the inbox, so the next server turn decides them together.
    server.stop()
    worker = cluster.start_worker("w1", concurrency=4)
    with psycopg.connect(pg_database, autocommit=True) as conn:

        def all_run() -> bool:
            row = conn.execute(
                "SELECT count(*) FROM task_queue WHERE status NOT IN ('done', 'canceled')"
            ).fetchone()
            return row is not None and row[0] == 0

        wait_until(all_run, 60, "every task to run")
    worker.stop()
    restarted = time.monotonic()
    server = cluster.start_server(name="server2")
    cluster.start_worker("w2", concurrency=4)  # the loop's other items
    assert cluster.wait_finished(loop, timeout=30)["status"] == "ok"
    assert time.monotonic() - restarted < 30
    result = cluster.wait_finished(bad, timeout=30)
    assert result["status"] == "fail"
    assert result["error"].startswith("internal error: ValueError")
    assert "cannot store a value" in result["error"]
    events = cluster.events(bad)
    finished = [e for e in events if e["type"] == "workflow.finished"]
    assert len(finished) == 1 and finished[0]["payload"]["internal"] is True
    time.sleep(3)  # no retry: nothing more is written, nothing more is logged
    assert len(cluster.events(bad)) == len(events)
    log = server.output()
    assert log.count(f"execution {bad} failed") == 1, log[-3000:]
    assert "orchestrator turn failed" not in log
    with psycopg.connect(pg_database, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM inbox").fetchone()
    assert row is not None and row[0] == 0


# --- one copy of the workload ------------------------------------------------------------


def test_the_workload_is_stored_once_and_tasks_still_see_it(
    cluster: Cluster, pg_database: str
) -> None:
    cluster.start_server()
    cluster.start_worker("w1", concurrency=4)
    marker = "MARKER-" + "z" * 5000
    execution_id = cluster.start_execution(ECHO, {"marker": marker})
    result = cluster.wait_finished(execution_id, timeout=60)
    assert result["status"] == "ok", result
    assert result["context"]["seen"] == ["MARKER-z"] * 20
    assert result["workload"] == {"marker": marker}
    like = "%MARKER-zzzz%"
    with psycopg.connect(pg_database, autocommit=True) as conn:
        counts = {
            table: conn.execute(
                f"SELECT count(*) FROM {table} WHERE {column}::text LIKE %s", (like,)
            ).fetchone()
            for table, column in (
                ("event_log", "payload"),
                ("execution_input", "workload"),
                ("task_queue", "payload"),
                ("inbox", "payload"),
            )
        }
    assert {table: row[0] for table, row in counts.items() if row} == {
        "event_log": 1,
        "execution_input": 0,
        "task_queue": 0,
        "inbox": 0,
    }
