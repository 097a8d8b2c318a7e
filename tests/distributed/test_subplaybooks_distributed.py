"""Child playbooks on a real server and workers over PostgreSQL: a loop whose tool is a
`playbook`, each item a child whose `return_step` result is collected, at most
`max_concurrency` children at once, on workers with one task slot each (a parent task
waiting for its child holds no slot); and a `return_step` the child does not have."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl.store import open_store
from tests.distributed.cluster import Cluster
from tests.integration.test_playbook_return_step import CHILD, parent

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path) -> Iterator[Cluster]:
    root = tmp_path / "root"
    (root / "flows" / "child").mkdir(parents=True)
    (root / "flows" / "child" / "child.yaml").write_text(CHILD, encoding="utf-8")
    cl = Cluster(db=pg_database, workdir=tmp_path)
    cl.env = {"NOETL_PLAYBOOKS_ROOT": str(root)}
    try:
        cl.start_server()
        # One slot each: two parents waiting for their children must not starve them.
        cl.start_worker("w1", concurrency=1)
        cl.start_worker("w2", concurrency=1)
        yield cl
    finally:
        cl.stop_all()


def test_a_loop_of_registered_children_collects_each_return_step(
    cluster: Cluster, pg_database: str
) -> None:
    store = open_store(pg_database)
    try:
        store.register_playbook("catalog/child", "child", CHILD, time.time())
    finally:
        store.close()
    loop = (
        "    loop: {collection: [1, 2, 3, 4, 5], element: x, mode: parallel, max_concurrency: 2}\n"
    )
    tool = (
        '{kind: playbook, path: catalog/child, return_step: made, args: {n: "{{ x }}", sleep: 0.5}}'
    )
    text = parent(tool, loop=loop, result="result: {collect: {into: got, mode: list}}")
    execution_id = cluster.start_execution(text)
    result = cluster.wait_finished(execution_id, timeout=120)
    assert result["status"] == "ok", json.dumps(result)[:3000]
    got = result["context"]["got"]
    assert [g["tripled"] for g in got] == [3, 6, 9, 12, 15]
    spans = [g["span"] for g in got]
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most <= 2, spans


def test_a_child_file_by_catalog_style_path_and_a_missing_return_step(cluster: Cluster) -> None:
    good = parent("{kind: playbook, path: flows/child, return_step: made, args: {n: 7}}")
    result = cluster.wait_finished(cluster.start_execution(good), timeout=90)
    assert result["status"] == "ok", json.dumps(result)[:3000]
    assert result["context"]["child"]["tripled"] == 21
    bad = parent("{kind: playbook, path: flows/child, return_step: nowhere}")
    result = cluster.wait_finished(cluster.start_execution(bad), timeout=90)
    assert result["status"] == "fail"
    error = result["steps"]["call"]["error"]
    assert "return_step 'nowhere' is not a step of child playbook 'flows/child'" in error
