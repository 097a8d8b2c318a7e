"""The console's schedules page in a real browser: a playbook's schedule with its next
tick, pause and resume, run now leading to the execution."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import LocalServer, shot, visit
from tests.helpers.auth import bearer

pytestmark = pytest.mark.slow

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: nightly, path: etl/nightly}
triggers:
  - name: night
    cron: "30 2 * * *"
    timezone: Europe/Berlin
workflow:
  - step: start
    tool: {kind: noop, args: {}}
"""


def test_the_schedules_page(page: Any, local_server: LocalServer, artifacts: Path) -> None:
    registered = httpx.post(
        f"{local_server.url}/api/playbooks",
        json={"content": PLAYBOOK},
        headers=bearer(local_server.token),
        timeout=10,
    )
    assert registered.status_code == 201, registered.text
    visit(page, local_server, "/ui/#/schedules")
    row = page.locator("#schedules tr[data-name='etl/nightly:night']")
    row.wait_for()
    cells = row.locator("td").all_inner_texts()
    assert cells[:4] == ["etl/nightly:night", "etl/nightly", "30 2 * * * (Europe/Berlin)", "active"]
    assert "T02:30:00+0" in cells[4]
    shot(page, artifacts, "schedules")

    row.get_by_role("button", name="pause").click()
    page.locator("#schedule-status", has_text="paused").wait_for()
    assert row.locator("td").nth(3).inner_text() == "paused"
    row.get_by_role("button", name="resume").click()
    page.locator("#schedule-status", has_text="resumed").wait_for()

    row.get_by_role("button", name="run now").click()
    link = page.locator("#schedule-status a")
    link.wait_for()
    execution_id = link.inner_text()
    assert local_server.store.get_execution(execution_id) is not None
    assert "(run now)" in row.locator("td").nth(5).inner_text()
    # the schedule's latest ticks, each with the execution it started
    row.get_by_role("button", name="ticks").click()
    started = page.locator("#schedule-ticks a", has_text=execution_id)
    started.wait_for()
    assert "started" in page.locator("#schedule-ticks tbody tr").first.inner_text()
    link.click()
    page.wait_for_url(f"**/#/executions/{execution_id}")
