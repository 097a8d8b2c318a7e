"""The execution page's timeline (Gantt chart) and a loop's failed share on the graph, in a
real browser over a server in this process (SQLite).

No worker runs here: the test plays it with the store's queue, and the server's
orchestrator loop decides (and schedules the retries) as it would in production.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from noetl.core import Outcome
from noetl.store.base import Store
from tests.browser.conftest import LocalServer, shot, visit
from tests.browser.test_console_pages import start
from tests.distributed.cluster import wait_until
from tests.helpers.auth import bearer

pytestmark = pytest.mark.slow

ITEMS = 30
LOOP = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: retries}}
workflow:
  - step: start
    next: [items]
  - step: items
    loop:
      collection: "{{{{ range({ITEMS}) | list }}}}"
      mode: parallel
    tool:
      kind: noop
      args: {{n: "{{{{ item }}}}"}}
      retry: {{max_attempts: 2, initial_delay: 0.05, jitter: false}}
    next: [done]
  - step: done
"""


def play(store: Store, count: int, failing: set[int]) -> list[int]:
    """Run `count` queued tasks, failing those of the items in `failing`; their indexes."""
    leases: list[Any] = []
    wait_until(
        lambda: (
            bool(leases.extend(store.claim("browser-test", limit=count - len(leases))))
            or len(leases) >= count
        ),
        10,
        f"{count} tasks",
    )
    indexes = []
    for lease in leases:
        task = lease.task
        if task.index in failing:
            outcome = Outcome(task.task_id, ok=False, error=f"item {task.index} broke")
        else:
            outcome = Outcome(task.task_id, ok=True, this=task.args)
        assert store.complete(task.task_id, lease.token, outcome.to_payload())
        indexes.append(task.index)
    return indexes


def test_the_timeline_shows_steps_items_and_each_attempt(
    page: Any, local_server: LocalServer, artifacts: Path
) -> None:
    store = local_server.store
    execution_id = start(local_server, LOOP)
    assert sorted(play(store, ITEMS, failing={3, 7})) == list(range(ITEMS))
    visit(page, local_server, f"/ui/#/executions/{execution_id}")
    # Items 3 and 7 failed once: their retries run (scheduled) after the failed attempt.
    statuses = """(index) => [...document.querySelectorAll(
        `#gantt .gantt-item-row[data-index="${index}"] .gantt-seg`)].map((s) => s.dataset.status)
        .join(' ')"""
    page.wait_for_function(f"() => ({statuses})(7) === 'failed running'")
    assert page.evaluate(f"() => ({statuses})(3)") == "failed running"
    # The two retries: item 3 succeeds on its second attempt, item 7 fails again; the
    # chart follows without a reload.
    assert sorted(play(store, 2, failing={7})) == [3, 7]
    page.wait_for_function(f"() => ({statuses})(7) === 'failed failed'")
    page.wait_for_selector('#execution-status [data-status="fail"]')
    step = page.locator('#gantt .gantt-step-row[data-step="items"]')
    step.wait_for()
    assert step.get_attribute("data-status") == "failed"
    assert "30 tasks, 2 retries" in step.inner_text()
    # At most 20 items are listed, the retried ones first; the ten others in one row.
    items = page.locator('#gantt .gantt-item-row[data-step="items"]')
    assert items.count() == 20
    listed = [int(i) for i in items.evaluate_all("rows => rows.map(r => r.dataset.index)")]
    assert {3, 7} <= set(listed) and len(set(listed)) == 20
    more = page.locator('#gantt .gantt-more-row[data-step="items"]')
    assert (more.get_attribute("data-tasks"), more.get_attribute("data-attempts")) == ("10", "10")
    assert "10 ok" in more.inner_text()
    # A retry is a segment of its own; a failed attempt is marked failed.
    three = page.locator('#gantt .gantt-item-row[data-index="3"] .gantt-seg')
    seven = page.locator('#gantt .gantt-item-row[data-index="7"] .gantt-seg')
    assert three.evaluate_all("s => s.map(x => x.dataset.status)") == ["failed", "ok"]
    assert seven.evaluate_all("s => s.map(x => x.dataset.status)") == ["failed", "failed"]
    assert "item 7 broke" in (seven.nth(1).get_attribute("title") or "")
    red = seven.nth(1).evaluate("el => getComputedStyle(el).backgroundColor")
    green = three.nth(1).evaluate("el => getComputedStyle(el).backgroundColor")
    assert red != green
    # Segments sit in time order inside the track: the retry after the first attempt.
    lefts = three.evaluate_all("s => s.map(x => x.getBoundingClientRect().left)")
    assert lefts[0] <= lefts[1]
    # The step that never started has no row, and the header says so.
    assert page.locator('#gantt .gantt-step-row[data-step="done"]').count() == 0
    assert page.locator('#gantt .gantt-step-row[data-step="start"]').count() == 1
    assert "1 step not started" in page.locator("#gantt-info").inner_text()
    shot(page, artifacts, "timeline")
    # A click on a step's name opens the step.
    step.locator("button").click()
    page.wait_for_selector("#step-name")
    assert page.locator("#step-name").inner_text() == "items"


def test_a_loop_with_some_failed_items_shows_their_share(
    page: Any, local_server: LocalServer, artifacts: Path
) -> None:
    store = local_server.store
    execution_id = start(local_server, LOOP.replace("max_attempts: 2", "max_attempts: 1"))
    play(store, ITEMS, failing={4, 9, 21})
    visit(page, local_server, f"/ui/#/executions/{execution_id}")
    node = page.locator('#graph g.node[data-step="items"]')
    page.wait_for_function(
        "() => document.querySelector('#graph g.node[data-step=items]')?.dataset.failed === '3'"
    )
    assert node.get_attribute("data-status") == "failed"
    classes = (node.get_attribute("class") or "").split()
    assert "partial" in classes  # not drawn all red
    assert node.locator("text.fails").text_content() == "3 failed"
    ok_width = float(node.locator("rect.bar").get_attribute("width") or 0)
    fail_width = float(node.locator("rect.bar-fail").get_attribute("width") or 0)
    assert fail_width > 0 and ok_width > 0
    assert round(fail_width / (ok_width + fail_width), 1) == round(3 / ITEMS, 1)
    fill = node.locator("rect.box").evaluate("el => getComputedStyle(el).fill")
    assert fill == "rgb(255, 255, 255)"
    assert "3 of 30 items failed" in (node.locator("title").first.text_content() or "")
    # Every item failed: the loop is red all over.
    all_failed = start(local_server, LOOP.replace("max_attempts: 2", "max_attempts: 1"))
    play(store, ITEMS, failing=set(range(ITEMS)))
    wait_until(
        lambda: (
            httpx.get(
                f"{local_server.url}/api/executions/{all_failed}",
                headers=bearer(local_server.token),
            ).json()["status"]
            == "fail"
        ),
        10,
        "the execution to fail",
    )
    visit(page, local_server, f"/ui/#/executions/{all_failed}")
    page.wait_for_function(
        "() => document.querySelector('#graph g.node[data-step=items]')?.dataset.failed === '30'"
    )
    classes = (node.get_attribute("class") or "").split()
    assert "status-failed" in classes and "partial" not in classes
    shot(page, artifacts, "loop-all-failed")


def test_the_chart_window_and_the_tasks_of_a_step(page: Any, local_server: LocalServer) -> None:
    visit(page, local_server, "/ui/")
    found = page.evaluate(
        """async () => {
          const m = await import('/ui/js/views/gantt.js');
          const span = (task_id, index, attempt, started_at, finished_at) =>
            ({task_id, index, attempt, started_at, finished_at, status: 'ok'});
          const spans = [
            span('t.1', 1, 1, 12, 13), span('t.0', 0, 1, 11, 14), span('t.1', 1, 2, 15, 19),
          ];
          const data = {started_at: 10, finished_at: null, steps: [{started_at: 9, spans}]};
          return {
            window: m.ganttWindow(data, 17),
            ended: m.ganttWindow({...data, finished_at: 30}, 17),
            tasks: m.groupTasks(spans).map((t) => [t.taskId, t.attempts.map((a) => a.attempt)]),
            counts: m.statusCounts({ok: 3, failed: 1}),
          };
        }"""
    )
    # From the earliest start to the latest end, or to now while it runs.
    assert found["window"] == {"start": 9, "end": 19}
    assert found["ended"] == {"start": 9, "end": 30}
    assert found["tasks"] == [["t.1", [1, 2]], ["t.0", [1]]]
    assert found["counts"] == "3 ok, 1 failed"
