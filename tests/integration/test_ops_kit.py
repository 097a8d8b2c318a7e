"""The operations kit (ops/): alert rules and the dashboard, checked with promtool, and
every metric they use is one the code exports.

promtool comes with Debian's `prometheus` package (.ci/run installs it); without it these
tests skip, unless NOETL_TEST_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl.observability.metrics import ALL_METRIC_NAMES

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "ops" / "prometheus" / "alerts.yml"
ALERT_TESTS = ROOT / "ops" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "noetl.json"
OPERATIONS = ROOT / "docs" / "operations.md"
METRIC = re.compile(r"\bnoetl_[a-z_]+")


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("NOETL_TEST_REQUIRE_SERVICES") == "1":
            pytest.fail("promtool is missing (apt-get install prometheus)")
        pytest.skip("promtool is missing (apt-get install prometheus)")
    return found


def run(promtool: str, *args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def alert_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [t["expr"] for p in data["panels"] if p["type"] != "row" for t in p["targets"]]


def family(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in ALL_METRIC_NAMES:
            return name[: -len(suffix)]
    return name


def test_the_alert_rules_are_valid(promtool: str) -> None:
    assert "SUCCESS: 12 rules found" in run(promtool, "check", "rules", str(ALERTS))


def test_the_alerts_fire_as_their_unit_tests_expect(promtool: str) -> None:
    assert "SUCCESS" in run(promtool, "test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)


def test_every_dashboard_expression_parses(promtool: str, tmp_path: Path) -> None:
    exprs = dashboard_exprs()
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"noetl:panel_{i}", "expr": expr} for i, expr in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    assert f"SUCCESS: {len(exprs)} rules found" in run(promtool, "check", "rules", str(path))


def test_the_dashboard_has_the_panels_of_seed_000() -> None:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    rows = [p["title"] for p in data["panels"] if p["type"] == "row"]
    assert rows == ["Execution overview", "Worker health", "Sinks", "Guards"]
    titles = {p["title"] for p in data["panels"]}
    for wanted in (
        "Executions completed by status",
        "Step duration p95 by step",
        "Top failing steps (24h)",
        "Tasks completed per pool",
        "Running tasks by kind",
        "Average task duration by kind",
        "DLQ inflow",
        "Sink error rate by sink",
        "Sink duration p95 by sink",
        "Retries per sink",
        "When outcome distribution",
        "Parked steps over time",
    ):
        assert wanted in titles
    ids = [p["id"] for p in data["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_and_alerts_use_only_metrics_the_code_exports() -> None:
    used = set()
    for expr in dashboard_exprs() + [str(rule["expr"]) for rule in alert_rules()]:
        used |= {family(name) for name in METRIC.findall(expr)}
    assert used, "no metric found"
    assert used <= ALL_METRIC_NAMES, sorted(used - ALL_METRIC_NAMES)
    # the metrics that matter most are on the dashboard
    for name in ("noetl_dlq_total", "noetl_steps_parked", "noetl_task_queue_delay_seconds"):
        assert name in used


def test_every_alert_carries_the_payload_fields_and_a_runbook_that_exists() -> None:
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in OPERATIONS.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }
    names = set()
    for rule in alert_rules():
        names.add(rule["alert"])
        assert rule["labels"]["severity"] in ("page", "ticket"), rule["alert"]
        assert rule["labels"]["error_class"], rule["alert"]
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook", "link"} <= set(annotations), rule["alert"]
        assert annotations["link"].startswith("/api/executions"), rule["alert"]
        anchor = annotations["runbook"].split("#", 1)[1]
        assert anchor in headings, f"{rule['alert']}: no heading for #{anchor}"
        expr = str(rule["expr"])
        if "by (workflow, step" in expr:  # per-step alerts name the workflow and the step
            assert '"workflow_ref"' in expr and '"step_id"' in expr, rule["alert"]
    assert {
        "HighDLQGrowth",
        "StepFailureRateHigh",
        "WorkerStalled",
        "SinkErrorRateHigh",
        "ExecutionSLAExceeded",
        "DLQNotEmpty",
        "DLQTooComplex",
        "ExecutionStuck",
        "RetentionStalled",
    } <= names
