"""The execution page shows the plan's complexity score, with a "too complex" badge when
it is at or over `complexity.warn` (seed 002's policy)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import LocalServer, shot, visit
from tests.browser.test_console_pages import start

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
