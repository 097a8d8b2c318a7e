"""Seed 002's complexity policy: a plan's score at start, a start refused over
`complexity.refuse`, one reported over `complexity.warn` (log event, metric), and the dead
letters of such an execution escalated and scored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noetl.cli.local_api import local_client
from noetl.dsl.complexity import SUB_PLAYBOOK, UNKNOWN_LOOP, estimate
from noetl.dsl.validate import load_playbook_text
from noetl.engine.options import EngineOptions
from noetl.observability.metrics import Metrics
from noetl.observability.metrics_observer import MetricsObserver
from noetl.runtime.local import embedded_runtime
from noetl.store import open_store
from tests.helpers.cli import noetl

PLAN = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: big_plan}
workload: {items: [1, 2, 3, 4]}
workflow:
  - step: start
    next: [a, b, c]
  - step: a
    loop: {collection: "{{ workload.items }}", element: n}
    tool: {kind: noop}
    result: {as: a_out}
  - step: b
    loop: {collection: "{{ range(50) | list }}", element: n}
    tool: {kind: noop}
  - step: c
    loop: {collection: "{{ a_out }}", element: n}
    tool: {kind: playbook, spec: {path: child}}
"""
FAILS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: failing_plan}
workload: {items: [1, 2, 3]}
workflow:
  - step: start
    loop: {collection: "{{ workload.items }}", element: n}
    tool: {kind: python, code: "def main(context, args):\\n    raise ValueError('no')\\n"}
    retry: false
"""


def test_the_score_counts_steps_edges_loops_fanout_and_sub_playbooks() -> None:
    playbook = load_playbook_text(PLAN, "p.yaml").require()
    found = estimate(playbook, {"items": [1, 2, 3, 4]})
    assert found.to_dict() == {
        "score": 4 + 3 + (4 + 50) + UNKNOWN_LOOP + 3 * 5 + SUB_PLAYBOOK,
        "steps": 4,
        "edges": 3,
        "loops": 3,
        "loop_items": 54,
        "unknown_loops": 1,
        "max_fanout": 3,
        "sub_playbooks": 1,
    }
    bigger = estimate(playbook, {"items": list(range(1000))})
    assert bigger.loop_items == 1050 and bigger.score == found.score + 996
    assert "loop items" in bigger.biggest().split(",")[0]


def test_a_start_over_the_refusal_threshold_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(PLAN, encoding="utf-8")
    env = {"NOETL_COMPLEXITY_REFUSE": "100"}
    refused = noetl("run", path, "--db", tmp_path / "n.db", env=env, clean_env=True)
    assert refused.returncode == 1
    assert "too complex to start" in refused.stderr and "complexity.refuse is 100" in refused.stderr
    assert "Traceback" not in refused.stderr
    listed = noetl("exec", "list", "--db", tmp_path / "n.db", "--json", clean_env=True)
    assert json.loads(listed.stdout)["items"] == []  # nothing was started


def test_a_start_over_the_warning_threshold_is_logged_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "fails.yaml"
    path.write_text(FAILS, encoding="utf-8")
    env = {"NOETL_COMPLEXITY_WARN": "3"}
    args = ("run", path, "--db", tmp_path / "n.db", "--log-format", "json", "--json")
    proc = noetl(*args, "--log-level", "WARNING", env=env, clean_env=True)
    assert proc.returncode == 1
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    by_name = {r["msg"]: r for r in records}
    assert by_name["plan.too_complex"]["complexity"]["score"] == 1 + 3
    assert by_name["plan.too_complex"]["threshold"] == 3
    assert by_name["dlq.too_complex"]["workflow_ref"] == "failing_plan"
    execution_id = json.loads(proc.stdout)["execution_id"]
    store = open_store(str(tmp_path / "n.db"))
    try:
        entries = store.list_dead_letters(execution_id=execution_id)
    finally:
        store.close()
    assert entries and all(e.payload["complexity"] == 4 for e in entries)
    assert all(e.payload["too_complex"] is True for e in entries)
    with local_client(str(tmp_path / "n.db")) as client:
        detail = client.get(f"/api/executions/{execution_id}")
    assert detail["complexity"]["score"] == 4


def metric(metrics: Metrics, name: str) -> dict[tuple[Any, ...], float]:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[tuple[Any, ...], float] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


@pytest.mark.parametrize(("warn", "counted"), [(3, True), (1000, False)])
def test_the_metrics_count_too_complex_starts_and_their_dead_letters(
    tmp_path: Path, warn: int, counted: bool
) -> None:
    metrics = Metrics()
    options = EngineOptions(complexity_warn=warn)
    playbook = load_playbook_text(FAILS, "f.yaml").require()
    with embedded_runtime(
        str(tmp_path / "n.db"), workers=2, metrics=metrics, options=options
    ) as rt:
        execution_id = rt.start(playbook)
        rt.wait([execution_id])
    label = (("workflow", "failing_plan"),)
    assert metric(metrics, "noetl_plan_too_complex_total") == ({label: 1.0} if counted else {})
    assert metric(metrics, "noetl_dlq_too_complex_total") == ({label: 3.0} if counted else {})
    assert MetricsObserver(metrics).complexity_warn is None


def test_the_api_refuses_a_start_over_the_threshold_with_422(tmp_path: Path) -> None:
    from noetl import __version__
    from noetl.runtime.orchestrator import Orchestrator
    from noetl.server.app import create_app
    from tests.helpers.auth import auth_headers
    from tests.helpers.testclient import TestClient

    store = open_store(str(tmp_path / "n.db"))
    try:
        strict = Orchestrator(store, owner="test", options=EngineOptions(complexity_refuse=10))
        app = create_app(store, strict, version=__version__)
        with TestClient(app, headers=auth_headers(store)) as client:
            answer = client.post("/api/executions", json={"playbook": PLAN})
            assert answer.status_code == 422
            body = answer.json()
            assert body["error"] == "too_complex"
            assert "scores 226" in body["message"] and "complexity.refuse is 10" in body["message"]
            small = client.post(
                "/api/executions", json={"playbook": FAILS.replace("[1, 2, 3]", "[1]")}
            )
            assert small.status_code == 201
            detail = client.get(f"/api/executions/{small.json()['execution_id']}").json()
            assert detail["complexity"]["score"] == 2 and detail["too_complex"] is False
    finally:
        store.close()
