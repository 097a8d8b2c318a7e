"""A step on a cycle of the graph in the console: the runs badge on the graph, the runs
of the step page, and its attempts by run, over a server in this process (SQLite).

No worker runs here: the test plays it with the store's queue, one task at a time, and the
server's orchestrator loop starts each new run of the cycle as it would in production.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from noetl.core import Outcome
from noetl.store.base import Store
from tests.browser.conftest import LocalServer, shot, visit
from tests.browser.test_console_pages import start
from tests.distributed.cluster import wait_until

TIMES = "\u00d7"  # the multiplication sign of the "x3" badge

pytestmark = pytest.mark.slow

CYCLE = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: paging}
workflow:
  - step: start
    next: [fetch]
  - step: fetch
    tool: {kind: noop, args: {page: "{{ (pages | default([]) | length) + 1 }}"}}
    result: {collect: {into: pages}}
    next: [check]
  - step: check
    next:
      mode: exclusive
      to:
        - {step: fetch, when: "{{ pages | length < 3 }}"}
        - {step: done}
  - step: done
"""


def play_one(store: Store) -> str:
    """Wait for the next queued task, run it (its args are its output); its task id."""
    leases: list[Any] = []
    wait_until(
        lambda: bool(leases.extend(store.claim("browser-test", limit=1)) or leases), 10, "a task"
    )
    (lease,) = leases
    task = lease.task
    outcome = Outcome(task.task_id, ok=True, this=task.args)
    assert store.complete(task.task_id, lease.token, outcome.to_payload())
    return str(task.task_id)


def badge_is(page: Any, step: str, text: str) -> None:
    page.wait_for_function(
        """([step, text]) => {
          const g = document.querySelector(`#graph g.node[data-step="${step}"] g.runs-badge`);
          return g && g.getAttribute('visibility') === 'visible'
            && g.querySelector('text.runs-text').textContent === text;
        }""",
        arg=[step, text],
    )


def test_a_cycle_shows_its_runs_on_the_graph_and_the_step_page(
    page: Any, local_server: LocalServer, artifacts: Path
) -> None:
    store = local_server.store
    execution_id = start(local_server, CYCLE)
    assert play_one(store) == f"{execution_id}.fetch"
    # The orchestrator starts fetch's second run: its task has an id of its own.
    visit(page, local_server, f"/ui/#/executions/{execution_id}")
    badge_is(page, "fetch", "run 2")
    fetch = page.locator('#graph g.node[data-step="fetch"]')
    assert fetch.get_attribute("data-status") == "running"
    assert fetch.get_attribute("data-runs") == "2"
    assert "(run 2 of 2)" in (fetch.locator("title").first.text_content() or "")
    assert page.locator('#steps tr[data-step="fetch"] td.runs').inner_text() == "run 2"
    shot(page, artifacts, "cycle-running")

    assert play_one(store) == f"{execution_id}.fetch.run2"
    assert play_one(store) == f"{execution_id}.fetch.run3"
    # Live: the page follows without a reload.
    page.wait_for_selector('#execution-status [data-status="ok"]')
    badge_is(page, "fetch", f"{TIMES}3")
    badge_is(page, "check", f"{TIMES}3")
    for once in ("start", "done"):
        node = page.locator(f'#graph g.node[data-step="{once}"]')
        assert node.locator("g.runs-badge").get_attribute("visibility") == "hidden"
        assert page.locator(f'#steps tr[data-step="{once}"] td.runs').inner_text() == ""
    assert page.locator('#steps tr[data-step="check"] td.runs').inner_text() == f"{TIMES}3"

    fetch.click()
    page.wait_for_selector("#runs tbody tr")
    assert page.locator("#step-runs").inner_text() == "3; the times below are run 3's"
    runs = page.locator("#runs tbody tr")
    assert runs.count() == 3
    cells = [runs.nth(i).locator("td").all_inner_texts() for i in range(3)]
    assert [(c[0], c[1], c[2], c[5]) for c in cells] == [
        ("1", "ok", "start", "1"),
        ("2", "ok", "check", "1"),
        ("3", "ok", "check", "1"),
    ]
    assert all(c[4] for c in cells), "each run says how long it took"
    attempts = page.locator("#attempts tbody tr")
    assert [attempts.nth(i).get_attribute("data-run") for i in range(3)] == ["1", "2", "3"]
    assert page.locator("#attempts thead th").first.inner_text().lower() == "run"
    # A run's row shows only its attempts.
    runs.nth(1).click()
    page.wait_for_function("() => document.querySelectorAll('#attempts tbody tr').length === 1")
    assert attempts.first.get_attribute("data-task-id") == f"{execution_id}.fetch.run2"
    assert page.locator("#attempt-run").input_value() == "2"
    assert "selected" in (page.locator('#runs tr[data-run="2"]').get_attribute("class") or "")
    page.select_option("#attempt-run", "")
    page.wait_for_function("() => document.querySelectorAll('#attempts tbody tr').length === 3")
    shot(page, artifacts, "cycle-done")

    # A step that ran once has no runs list and no run column.
    page.locator('#graph g.node[data-step="start"]').click()
    page.wait_for_function("() => document.querySelector('#step-name')?.textContent === 'start'")
    assert page.locator("#runs").count() == 0
    assert page.locator("#step-runs").count() == 0
    # The timeline says which run a call started.
    page.select_option("#event-type", "step.called")
    page.select_option("#event-step", "fetch")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#timeline tbody tr')]"
        ".some((r) => r.textContent.includes('called by check: run 3'))"
    )
