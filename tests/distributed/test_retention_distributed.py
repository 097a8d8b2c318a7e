"""The server's retention job on PostgreSQL: real servers and a worker, a real database.

The job runs every second and prunes what finished over 2 s ago: a finished execution's
history goes (its status answers 410 with the date), a long execution running meanwhile
is never touched and finishes ok, the metrics count the rows, and two servers sharing the
database never prune at once (the advisory lock)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from noetl.store.managers.retention import RETENTION_LOCK
from tests.distributed.cluster import Cluster, wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]

QUICK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: quick}
workflow:
  - step: one
    tool: {kind: python, code: "def main(context, args):\\n    return {'n': 1}\\n"}
"""
# Long enough for several retention passes to run while it does.
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
            time.sleep(3)
            return 1
    next: [{step: second}]
  - step: second
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            time.sleep(3)
            return 2
"""


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path) -> Iterator[Cluster]:
    cl = Cluster(db=pg_database, workdir=tmp_path)
    cl.env.update(
        {
            "NOETL_RETENTION_ENABLED": "true",
            "NOETL_RETENTION_OLDER_THAN": "2s",
            "NOETL_RETENTION_INTERVAL_S": "1",
            "NOETL_RETENTION_BATCH": "1",
        }
    )
    try:
        yield cl
    finally:
        cl.stop_all()


def status_of(cluster: Cluster, execution_id: str) -> httpx.Response:
    return httpx.get(
        f"{cluster.url}/api/executions/{execution_id}", headers=cluster.headers, timeout=30
    )


def metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
    return 0.0 if match is None else float(match[1])


def test_the_job_prunes_finished_history_and_leaves_running_executions_alone(
    cluster: Cluster,
) -> None:
    cluster.start_server()
    cluster.start_worker("w1", concurrency=2)
    long_id = cluster.start_execution(LONG)
    quick_id = cluster.start_execution(QUICK)
    assert cluster.wait_finished(quick_id, timeout=30)["status"] == "ok"

    wait_until(lambda: status_of(cluster, quick_id).status_code == 410, 20, "the prune")
    gone = status_of(cluster, quick_id).json()
    assert gone["error"] == "pruned" and "history was pruned on" in gone["message"]
    events = httpx.get(
        f"{cluster.url}/api/executions/{quick_id}/events", headers=cluster.headers, timeout=30
    )
    assert events.status_code == 410
    listed = httpx.get(f"{cluster.url}/api/executions", headers=cluster.headers, timeout=30)
    tombstone = {e["execution_id"]: e for e in listed.json()["items"]}[quick_id]
    assert tombstone["status"] == "ok" and tombstone["finished_at"] is not None
    assert tombstone["pruned_at"] >= tombstone["finished_at"]

    # Passes ran while the long execution ran: it is whole, and finishes ok.
    assert status_of(cluster, long_id).json()["status"] == "running"
    finished = cluster.wait_finished(long_id, timeout=60)
    assert finished["status"] == "ok"
    assert {step: finished["steps"][step]["status"] for step in finished["steps"]} == {
        "first": "ok",
        "second": "ok",
    }

    scrape = httpx.get(f"{cluster.url}/metrics", headers=cluster.headers, timeout=30).text
    assert metric(scrape, "noetl_retention_pruned_rows_total", '{table="event_log"}') > 0
    assert metric(scrape, "noetl_retention_pruned_executions_total") >= 1
    assert metric(scrape, "noetl_retention_last_prune_timestamp_seconds") > time.time() - 60
    assert "retention_pass" in cluster.procs[0].output()


def test_only_one_process_prunes_a_database_at_a_time(cluster: Cluster) -> None:
    with psycopg.connect(cluster.db, autocommit=True) as holder:
        # Another pruner holds the lock: the server's passes skip, nothing is pruned.
        holder.execute("SELECT pg_advisory_lock(%s)", (RETENTION_LOCK,))
        cluster.start_server()
        cluster.start_worker("w1")
        quick_id = cluster.start_execution(QUICK)
        assert cluster.wait_finished(quick_id, timeout=30)["status"] == "ok"
        time.sleep(4)  # two seconds to age, then passes that find the lock taken
        assert status_of(cluster, quick_id).status_code == 200
        holder.execute("SELECT pg_advisory_unlock(%s)", (RETENTION_LOCK,))
    wait_until(lambda: status_of(cluster, quick_id).status_code == 410, 20, "the prune")
