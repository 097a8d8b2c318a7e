"""The execution page shows the plan's complexity score, with a "too complex" badge when
it is at or over `complexity.warn` (seed 002's policy); so does a dead-letter entry."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import LocalServer, shot, visit
from tests.browser.test_console_pages import play_worker, start

pytestmark = pytest.mark.slow

PLAN = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: plan}
workflow:
  - step: start
    next: [a, b]
  - step: a
    loop: {collection: "{{ range(20) | list }}", element: n}
    tool: {kind: noop}
  - step: b
"""
FAILS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fails}
workflow:
  - step: start
    next: [broken]
  - step: broken
    tool: {kind: python, code: "def main(): raise ValueError('no')"}
"""


@pytest.mark.parametrize(("warn", "badge"), [(10, True), (1000, False)])
def test_the_execution_shows_its_complexity(
    page: Any, local_server: LocalServer, artifacts: Path, warn: int, badge: bool
) -> None:
    decider = local_server.orchestrator.decider
    decider.options = dataclasses.replace(decider.options, complexity_warn=warn)
    execution_id = start(local_server, PLAN)
    visit(page, local_server, f"/ui/#/executions/{execution_id}")
    page.wait_for_selector("#execution-complexity")
    cell = page.locator("#execution-complexity")
    # 3 steps, 2 edges, 20 loop items, a fan-out of 2 (x5)
    assert cell.inner_text().split()[0] == str(3 + 2 + 20 + 2 * 5)
    assert "20 loop items" in (cell.get_attribute("title") or "")
    assert (page.locator("#too-complex").count() == 1) is badge
    shot(page, artifacts, "complexity")


@pytest.mark.parametrize(("warn", "badge"), [(3, True), (1000, False)])
def test_a_dead_letter_shows_its_plans_complexity(
    page: Any, local_server: LocalServer, artifacts: Path, warn: int, badge: bool
) -> None:
    decider = local_server.orchestrator.decider
    decider.options = dataclasses.replace(decider.options, complexity_warn=warn)
    execution_id = start(local_server, FAILS)
    play_worker(local_server.store, 1, error="no")
    deadline = time.monotonic() + 10
    while not (entries := local_server.store.list_dead_letters(execution_id=execution_id)):
        assert time.monotonic() < deadline, "no dead letter"
        time.sleep(0.05)
    visit(page, local_server, f"/ui/#/dlq/{entries[0].message_id}")
    page.wait_for_selector("#dlq-complexity")
    # 2 steps, 1 edge, a fan-out of 1 (x5)
    assert page.locator("#dlq-complexity").inner_text().split()[0] == str(2 + 1 + 5)
    assert (page.locator("#dlq-too-complex").count() == 1) is badge
    shot(page, artifacts, "dlq-complexity")
