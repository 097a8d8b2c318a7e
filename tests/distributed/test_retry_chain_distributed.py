"""A retry with `scope: chain` on a real server and workers over PostgreSQL: the chain's
delay is a timer of the server's, the case's branch tools run again in new tasks, and the
step's tool runs again under its own task id with the next attempt; a pipeline's chain
restarts from its first task on whichever worker takes the retry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.distributed.cluster import Cluster
from tests.integration.test_retry_triggers import CASE_CHAIN, CHAIN

pytestmark = [pytest.mark.services, pytest.mark.slow]
HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: chains}\n"


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path) -> Iterator[Cluster]:
    cl = Cluster(db=pg_database, workdir=tmp_path)
    try:
        cl.start_server()
        cl.start_worker("w1")
        cl.start_worker("w2")
        yield cl
    finally:
        cl.stop_all()


@pytest.mark.parametrize(
    ("body", "runs"),
    [
        (
            CASE_CHAIN.format(scope=", scope: chain", attempts=3),
            ["token", "fetch", "token", "fetch", "token", "fetch"],
        ),
        (CHAIN.format(scope=", scope: chain"), ["first", "second", "first", "second"]),
    ],
)
def test_a_chain_runs_again_from_its_first_task(
    cluster: Cluster, tmp_path: Path, body: str, runs: list[str]
) -> None:
    log = tmp_path / "runs.log"
    execution = cluster.start_execution(HEAD + body, workload={"log": str(log)})
    result = cluster.wait_finished(execution, timeout=90)
    assert result["status"] == "ok", json.dumps(result)[:3000]
    assert log.read_text().split() == runs
    retried = [e for e in cluster.events(execution) if e["type"] == "retry.started"]
    assert retried and all(e["payload"]["scope"] == "chain" for e in retried)
