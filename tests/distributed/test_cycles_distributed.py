"""A cycle of the graph on a real server and two workers over PostgreSQL: a playbook pages
through a real HTTP API on loopback with `fetch -> check -> fetch`; the server decides
each new run, the workers run its tasks (ids ending `.runN`)."""

from __future__ import annotations

import pytest

from tests.distributed.cluster import Cluster
from tests.helpers.loopback import base_url, serving
from tests.helpers.paging import EXPECTED_REPORT, PAGES, PagingHandler, paging_playbook

pytestmark = [pytest.mark.services, pytest.mark.slow]


def test_a_back_edge_pages_through_an_api_until_it_is_done(cluster: Cluster) -> None:
    cluster.start_server()
    cluster.start_worker("w1", concurrency=2)
    cluster.start_worker("w2", concurrency=2)
    with serving(PagingHandler) as server:
        execution_id = cluster.start_execution(paging_playbook(base_url(server)))
        result = cluster.wait_finished(execution_id, timeout=90)
    assert result["status"] == "ok", result
    events = cluster.events(execution_id)
    [report] = [e for e in events if e["type"] == "step.finished" and e["step"] == "report"]
    assert report["payload"]["result"] == EXPECTED_REPORT
    started = [
        e["payload"]["task"]["task_id"]
        for e in events
        if e["type"] == "step.started" and e["step"] == "fetch"
    ]
    suffixes = ["fetch"] + [f"fetch.run{n}" for n in range(2, PAGES + 1)]
    assert started == [f"{execution_id}.{suffix}" for suffix in suffixes]
