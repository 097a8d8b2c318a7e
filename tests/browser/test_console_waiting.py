"""Queued work with no worker alive, dialogs that close when the page changes, the playbook
of an execution nobody registered, and replaying a loop's dead letters at once.

Over a server in this process (SQLite) and no worker: a test plays one with the store's
queue (`claim`, `complete`), or registers one that heartbeats, as `noetl worker` does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from noetl.core import Outcome
from noetl.store.base import Store, WorkerRecord
from tests.browser.conftest import LocalServer, shot, visit
from tests.distributed.cluster import wait_until
from tests.helpers.auth import bearer

pytestmark = pytest.mark.slow
WAITING = "queued — no worker alive"

LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: numbers, path: team/numbers}
workflow:
  - step: start
    next: [items]
  - step: items
    loop:
      collection: [0, 1, 2, 3]
      mode: parallel
    tool: {kind: noop, args: {n: "{{ item }}"}}
"""


def api(server: LocalServer, method: str, path: str, **kwargs: Any) -> Any:
    response = httpx.request(
        method, f"{server.url}{path}", headers=bearer(server.token), timeout=10, **kwargs
    )
    assert response.is_success, response.text
    return response.json()


def start(server: LocalServer, playbook: str = LOOP) -> str:
    created = api(server, "POST", "/api/executions", json={"playbook": playbook})
    return str(created["execution_id"])


def queued(server: LocalServer, execution_id: str, count: int) -> None:
    def enough() -> bool:
        detail = api(server, "GET", f"/api/executions/{execution_id}")
        return bool(detail["queued_tasks"] == count)

    wait_until(enough, 10, f"{count} queued tasks")


def play_worker(store: Store, count: int, *, fail: frozenset[int] = frozenset()) -> None:
    """Run `count` queued tasks, failing the loop items in `fail`."""
    leases = store.claim("browser-test", limit=count)
    assert len(leases) == count
    for lease in leases:
        task = lease.task
        outcome = (
            Outcome(task.task_id, ok=False, error=f"item {task.index} broke", error_type="E")
            if task.index in fail
            else Outcome(task.task_id, ok=True, this=task.args)
        )
        assert store.complete(task.task_id, lease.token, outcome.to_payload())


def live_worker(store: Store, worker_id: str = "w-live") -> None:
    now = time.time()
    store.register_worker(WorkerRecord(worker_id, "default", "host", 1, "running", now, now))


def failed_loop(server: LocalServer) -> str:
    """A LOOP execution whose items 1 and 3 failed for good (dead-lettered)."""
    execution_id = start(server)
    queued(server, execution_id, 4)
    play_worker(server.store, 4, fail=frozenset({1, 3}))

    def failed() -> bool:
        detail = api(server, "GET", f"/api/executions/{execution_id}")
        return bool(detail["status"] == "fail" and detail["dead_letters"] == {"items": 2})

    wait_until(failed, 10, "the loop to fail with two dead letters")
    return execution_id


def test_queued_work_without_a_worker_shows_as_waiting_until_one_is_alive(
    page: Any, local_server: LocalServer, artifacts: Path
) -> None:
    execution_id = start(local_server)
    queued(local_server, execution_id, 4)
    visit(page, local_server, f"/ui/#/executions/{execution_id}?step=items")
    badge = page.locator("#execution-waiting")
    badge.wait_for()
    assert badge.inner_text() == WAITING
    assert page.locator("#execution-status").inner_text() == "running"
    notice = page.locator("#execution-waiting-notice").inner_text()
    assert "4 tasks of step items wait in the queue" in notice
    assert "no worker is alive" in notice
    assert page.locator("#execution-queued").inner_text() == "4 tasks · 0 workers alive"
    node = page.locator('svg.graph g.node[data-step="items"]')
    assert node.get_attribute("data-waiting") == "true"
    assert "waiting" in (node.get_attribute("class") or "")
    assert node.locator("text.waiting-label").text_content() == WAITING
    assert node.locator("text.sub").text_content() == "running · 0/4"
    start_node = page.locator('svg.graph g.node[data-step="start"]')
    assert start_node.get_attribute("data-waiting") is None
    row = page.locator('#steps tr[data-step="items"]')
    assert row.get_attribute("data-waiting") == "true"
    assert WAITING in row.inner_text()
    page.locator("#step-waiting").wait_for()
    shot(page, artifacts, "waiting")

    live_worker(local_server.store)
    badge.wait_for(state="detached")
    page.locator("#step-waiting").wait_for(state="detached")
    assert page.locator("#execution-waiting-notice").count() == 0
    assert node.get_attribute("data-waiting") is None
    assert node.locator("text.waiting-label").count() == 0
    assert page.locator("#execution-queued").inner_text() == "4 tasks · 1 worker alive"
    assert page.locator("#execution-status").inner_text() == "running"


def test_a_dialog_closes_when_the_page_changes(page: Any, local_server: LocalServer) -> None:
    execution_id = start(local_server)
    visit(page, local_server, "/ui/#/dlq")
    page.locator("h1", has_text="Dead letters").wait_for()
    page.evaluate(f"location.hash = '#/executions/{execution_id}'")
    dialog = page.locator("dialog.confirm")
    page.click("#cancel")
    dialog.wait_for()
    page.go_back()  # the back button: the DLQ list again, without the dialog
    dialog.wait_for(state="detached")
    page.locator("h1", has_text="Dead letters").wait_for()

    page.go_forward()
    page.click("#cancel")
    dialog.wait_for()
    page.evaluate("location.hash = '#/playbooks'")  # another route
    dialog.wait_for(state="detached")
    page.locator("#playbooks").wait_for()
    # Left without a choice: nothing was canceled.
    detail = api(local_server, "GET", f"/api/executions/{execution_id}")
    assert detail["status"] == "running"


def test_the_replay_dialog_warns_when_no_worker_is_alive_and_closes_on_leaving(
    page: Any, local_server: LocalServer
) -> None:
    execution_id = failed_loop(local_server)
    message_id = f"{execution_id}.items.1"
    visit(page, local_server, "/ui/#/dlq")
    page.locator(f'#dlq tr[data-message-id="{message_id}"]').wait_for()
    page.evaluate(f"location.hash = '#/dlq/{message_id}'")
    page.click("#replay")
    warning = page.locator("dialog.confirm #replay-no-worker")
    warning.wait_for()
    assert "the replayed task waits in the queue until one starts" in warning.inner_text()
    page.go_back()  # the dialog does not stay over the page before
    page.locator("dialog.confirm").wait_for(state="detached")
    page.locator("#dlq").wait_for()
    page.go_forward()
    page.wait_for_selector("#dlq-payload")

    live_worker(local_server.store)
    page.click("#replay")
    page.locator("dialog.confirm").wait_for()
    assert page.locator("#replay-no-worker").count() == 0
    page.click("dialog.confirm button.secondary")  # Cancel
    entry = api(local_server, "GET", f"/api/dlq/{message_id}")
    assert entry["status"] == "pending"


def test_replay_all_of_a_loops_dead_letters_from_the_execution_page(
    page: Any, local_server: LocalServer, artifacts: Path
) -> None:
    execution_id = failed_loop(local_server)
    visit(page, local_server, f"/ui/#/executions/{execution_id}")
    button = page.locator('#steps tr[data-step="items"] button.replay-all')
    button.wait_for()
    assert page.locator('#steps tr[data-step="start"] button.replay-all').count() == 0
    assert page.locator('#steps tr[data-step="items"] td.dead-letters').inner_text().startswith("2")
    button.click()
    dialog = page.locator("dialog.confirm")
    dialog.wait_for()
    assert dialog.locator("h2").inner_text() == "Replay 2 dead letters of step items?"
    assert (
        "the replayed tasks wait in the queue" in dialog.locator("#replay-no-worker").inner_text()
    )
    shot(page, artifacts, "replay-all")
    dialog.locator("button[type=submit]").click()
    result = page.locator("#replay-all-result")
    result.wait_for()
    assert result.inner_text() == "Replayed 2 dead letters of step items."
    entries = api(local_server, "GET", "/api/dlq", params={"execution_id": execution_id})
    assert sorted(e["status"] for e in entries["items"]) == ["replayed", "replayed"]
    # Reopened; the two items wait in the queue for a worker that is not there.
    page.locator("#execution-waiting").wait_for()
    assert page.locator("#execution-status").inner_text() == "running"
    button.wait_for(state="detached")
    play_worker(local_server.store, 2)

    def finished() -> bool:
        detail = api(local_server, "GET", f"/api/executions/{execution_id}")
        return bool(detail["status"] == "ok")

    wait_until(finished, 10, "the execution to end ok")
    page.locator('#execution-status [data-status="ok"]').wait_for()
    assert page.locator("#execution-waiting").count() == 0


def test_replay_all_from_the_step_panel(page: Any, local_server: LocalServer) -> None:
    execution_id = failed_loop(local_server)
    live_worker(local_server.store)
    visit(page, local_server, f"/ui/#/executions/{execution_id}?step=items")
    button = page.locator("#step-replay-all")
    button.wait_for()
    assert button.inner_text() == "Replay 2 dead letters…"
    button.click()
    dialog = page.locator("dialog.confirm")
    dialog.wait_for()
    assert dialog.locator("#replay-no-worker").count() == 0  # a worker is alive
    dialog.locator("button[type=submit]").click()
    assert page.locator("#step-replay-result").inner_text() == (
        "Replayed 2 dead letters of step items."
    )
    button.wait_for(state="detached")
    detail = api(local_server, "GET", f"/api/executions/{execution_id}")
    assert detail["dead_letters"] == {}


def test_the_playbook_link_of_an_unregistered_playbook_shows_its_text(
    page: Any, local_server: LocalServer
) -> None:
    execution_id = start(local_server)  # metadata.path team/numbers, never registered
    visit(page, local_server, f"/ui/#/executions/{execution_id}")
    link = page.locator("#execution-playbook")
    link.wait_for()
    assert link.inner_text() == "team/numbers"
    link.click()
    page.locator("#playbook-text").wait_for()
    assert page.locator("#execution-playbook-name").inner_text() == "numbers"
    lines = page.locator("#playbook-text .line").all_inner_texts()
    assert len(lines) == LOOP.count("\n")
    assert "collection: [0, 1, 2, 3]" in page.locator("#playbook-text").inner_text()
    assert "not registered in the catalog" in page.locator("#catalog-note").inner_text()
    assert page.locator(".notice.error").count() == 0

    api(local_server, "POST", "/api/playbooks", json={"content": LOOP})
    page.reload()
    catalog = page.locator("#catalog-link")
    catalog.wait_for()
    assert catalog.inner_text() == "team/numbers v1"
    catalog.click()
    page.locator("#playbook-text").wait_for()
    assert "v1 (latest)" in page.locator("#version").inner_text()
    page.go_back()
    page.click("#back-to-execution")
    page.locator("#execution-id").wait_for()
