"""Tool pipelines and task policy rules on a real server and workers over PostgreSQL: the
pipeline is ONE task of its step (one lease), rendered and retried on the worker that
holds it; a retry waiting on a worker ends when the execution is canceled."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.distributed.cluster import Cluster, wait_until
from tests.helpers.pipeline_playbooks import (
    CountingApi,
    ctx_patch,
    exhausted_playbook,
    loop_playbook,
    pipeline_playbook,
    playbook,
)

pytestmark = [pytest.mark.services, pytest.mark.slow]


@pytest.fixture
def api() -> Iterator[CountingApi]:
    server = CountingApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path) -> Iterator[Cluster]:
    cl = Cluster(db=pg_database, workdir=tmp_path)
    cl.env = {"NOETL_CREDENTIAL_PG_LOCAL": json.dumps({"dsn": pg_database})}
    try:
        cl.start_server()
        cl.start_worker("w1")
        cl.start_worker("w2")
        yield cl
    finally:
        cl.stop_all()


def test_a_pipeline_runs_as_one_task_on_a_worker(cluster: Cluster, api: CountingApi) -> None:
    key = "k" + uuid.uuid4().hex[:8]  # a bare hex key can read as a YAML number
    execution = cluster.start_execution(pipeline_playbook(api.base, key))
    result = cluster.wait_finished(execution, timeout=90)
    assert result["status"] == "ok", json.dumps(result)[:3000]
    assert api.calls[f"/flaky/{key}-a"] == 3
    assert api.calls[f"/flaky/{key}-b"] == 3
    events = cluster.events(execution)
    processed = [e["step"] for e in events if e["type"] == "tool.processed"]
    # one task per step, each try an attempt of it that the engine retried
    assert processed == ["start"] * 3 + ["single"] * 3 + ["check"]
    retries = [e["payload"] for e in events if e["type"] == "retry.started"]
    assert {(r["reason"], r["task"]) for r in retries} == {("rule", "fetch"), ("rule", "task_1")}
    assert ctx_patch(events, "start") == {"fetched_on": 3, "counted": 3}


def test_each_loop_item_runs_its_own_pipeline(cluster: Cluster) -> None:
    execution = cluster.start_execution(loop_playbook())
    result = cluster.wait_finished(execution, timeout=60)
    assert result["status"] == "ok", json.dumps(result)[:3000]


def test_exhausted_rule_retries_fail_the_execution_and_dead_letter_the_task(
    cluster: Cluster, api: CountingApi
) -> None:
    key = "k" + uuid.uuid4().hex[:8]  # a bare hex key can read as a YAML number
    execution = cluster.start_execution(exhausted_playbook(api.base, key))
    result = cluster.wait_finished(execution, timeout=60)
    assert result["status"] == "fail"
    assert api.calls[f"/down/{key}"] == 2
    events = cluster.events(execution)
    *_, processed = [e for e in events if e["type"] == "tool.processed"]
    assert processed["payload"]["error_type"] == "PolicyFailure"
    [dead] = [e["payload"] for e in events if e["type"] == "task.dead_lettered"]
    assert dead["reason"] == "exhausted"


def test_a_rule_s_retry_waits_in_the_queue_and_a_cancel_ends_it(
    cluster: Cluster, api: CountingApi
) -> None:
    key = "k" + uuid.uuid4().hex[:8]  # a bare hex key can read as a YAML number
    text = playbook(
        "waits",
        f"""
        workflow:
          - step: start
            tool:
              kind: http
              url: "{api.base}/down/{key}"
              spec:
                policy:
                  rules:
                    - when: "{{{{ output.status == 'error' }}}}"
                      then: {{do: retry, attempts: 5, delay: 20}}
        """,
    )
    execution = cluster.start_execution(text)
    wait_until(lambda: api.calls[f"/down/{key}"] == 1, 30, "the first try")
    began = time.monotonic()
    response = cluster.execution(execution)
    assert response["status"] == "running"
    cancel = httpx.post(
        f"{cluster.url}/api/executions/{execution}/cancel", headers=cluster.headers, timeout=30
    )
    assert cancel.status_code in (200, 202), cancel.text
    result = cluster.wait_finished(execution, timeout=30)
    assert result["status"] == "canceled"
    # The worker is free again well before the 20 s wait: a new execution runs now.
    quick = cluster.start_execution(
        playbook("quick", "workflow:\n  - step: start\n    tool: {kind: noop}\n")
    )
    assert cluster.wait_finished(quick, timeout=30)["status"] == "ok"
    assert time.monotonic() - began < 15
    assert api.calls[f"/down/{key}"] == 1
    # The retry waited in the queue, not on a worker: the engine scheduled it.
    [retry] = [e["payload"] for e in cluster.events(execution) if e["type"] == "retry.started"]
    assert retry["reason"] == "rule" and retry["delay_ms"] == 20_000
