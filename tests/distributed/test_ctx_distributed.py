"""Upstream NoETL's execution variables (`ctx`, `set:`, `iter`) on a real server and two
workers over PostgreSQL: the server decides and records every patch, the workers render
SQL and code with the values, and a server restarted in the middle of the execution
folds the log back to the same variables."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.distributed.cluster import Cluster, wait_until
from tests.helpers.ctx_playbooks import CTX_CHECK, CTX_FINAL, CTX_PLAYBOOK, CTX_STEPS, ctx_of

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path) -> Iterator[Cluster]:
    cl = Cluster(db=pg_database, workdir=tmp_path)
    cl.env["NOETL_CREDENTIAL_PG_LOCAL"] = json.dumps({"dsn": pg_database})
    try:
        yield cl
    finally:
        cl.stop_all()


def test_ctx_flows_through_set_loops_sql_and_code(cluster: Cluster, pg_database: str) -> None:
    cluster.start_server()
    cluster.start_worker("w1", concurrency=2)
    cluster.start_worker("w2", concurrency=2)
    execution_id = cluster.start_execution(CTX_PLAYBOOK)
    result = cluster.wait_finished(execution_id, timeout=90)
    assert result["status"] == "ok", result
    assert result["ctx"] == CTX_FINAL
    events = cluster.events(execution_id)
    assert ctx_of(events, CTX_STEPS) == CTX_FINAL
    [check] = [e for e in events if e["type"] == "step.finished" and e["step"] == "check"]
    assert check["payload"]["result"] == CTX_CHECK
    with psycopg.connect(pg_database) as conn:
        words = conn.execute("SELECT word FROM ctx_words ORDER BY position").fetchall()
    assert [w for (w,) in words] == ["A", "B", "C"]


def test_a_server_killed_mid_execution_folds_back_the_same_ctx(cluster: Cluster) -> None:
    server = cluster.start_server()
    cluster.start_worker("w1", concurrency=1)
    execution_id = cluster.start_execution(CTX_PLAYBOOK)

    def looping() -> bool:
        return any(e["type"] == "loop.started" for e in cluster.events(execution_id))

    wait_until(looping, 60, "the loop over ctx.words to start")
    before = ctx_of(cluster.events(execution_id), CTX_STEPS)
    assert before["words"] == ["a", "b", "c"] and before["started_by"] == "call.done"
    server.kill9()  # its state is gone; the next server folds the log again
    cluster.start_server(port=cluster.port, name="server2")
    result = cluster.wait_finished(execution_id, timeout=90)
    assert result["status"] == "ok", result
    assert ctx_of(cluster.events(execution_id), CTX_STEPS) == CTX_FINAL
