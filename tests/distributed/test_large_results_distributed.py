"""`result.select`, the spill of large results and the `artifact` tool on a real server
and workers over PostgreSQL: the workers keep whole results in the database's result
store, the event log keeps selections and envelopes, and any worker reads a whole result
back by its reference."""

from __future__ import annotations

import psycopg
import pytest

from tests.distributed.cluster import Cluster
from tests.helpers.select_playbook import EXPECTED_VERDICT, SELECT_PLAYBOOK, big_events
from tests.helpers.spill_playbook import EXPECTED_VERDICT as SPILL_VERDICT
from tests.helpers.spill_playbook import SPILL_PLAYBOOK
from tests.helpers.spill_playbook import big_events as spill_big_events

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_selected_results_stay_out_of_the_event_log(cluster: Cluster, pg_database: str) -> None:
    cluster.start_server()
    cluster.start_worker("w1", concurrency=2)
    cluster.start_worker("w2", concurrency=2)
    execution_id = cluster.start_execution(SELECT_PLAYBOOK)
    result = cluster.wait_finished(execution_id, timeout=90)
    assert result["status"] == "ok", result
    events = cluster.events(execution_id)
    [check] = [e for e in events if e["type"] == "step.finished" and e["step"] == "check"]
    assert check["payload"]["result"] == EXPECTED_VERDICT
    assert big_events(events) == [("tool.processed", "load")]
    with psycopg.connect(pg_database) as conn:
        kept = conn.execute(
            "SELECT step, bytes FROM result_store WHERE execution_id = %s ORDER BY step",
            (execution_id,),
        ).fetchall()
    assert [step for step, _ in kept] == ["pages", "pages", "pages", "start"]


def test_large_results_are_spilled_out_of_the_event_log(cluster: Cluster, pg_database: str) -> None:
    cluster.start_server()
    cluster.start_worker("w1", concurrency=2)
    execution_id = cluster.start_execution(SPILL_PLAYBOOK)
    result = cluster.wait_finished(execution_id, timeout=90)
    assert result["status"] == "ok", result
    events = cluster.events(execution_id)
    [check] = [e for e in events if e["type"] == "step.finished" and e["step"] == "check"]
    assert check["payload"]["result"] == SPILL_VERDICT
    assert spill_big_events(events) == [("tool.processed", "load")]
    with psycopg.connect(pg_database) as conn:
        kept = conn.execute(
            "SELECT step FROM result_store WHERE execution_id = %s ORDER BY step",
            (execution_id,),
        ).fetchall()
    assert [step for (step,) in kept] == ["pages", "pages", "start"]
