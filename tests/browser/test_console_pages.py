"""The console's pages in a real browser, over a server in this process (SQLite).

No worker runs here: a test that needs tasks done plays the worker with the store's queue
(`claim`, `complete`); the server's orchestrator loop decides, as it would in production.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from noetl.core import Outcome
from noetl.store.base import Store
from tests.browser.conftest import LocalServer, shot, visit
from tests.helpers.auth import bearer

pytestmark = pytest.mark.slow
DASH = "\u2013"  # the en dash of "events 1-100"

INSTANT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: greet
  path: demo/greet
workload:
  who: World
workflow:
  - step: start
    result:
      pick: "{{ {'hello': workload.who} }}"
      as: greeting
"""

LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: numbers}
workflow:
  - step: start
    next: [items]
  - step: items
    loop:
      collection: "{{ range(100) | list }}"
      mode: parallel
    tool: {kind: noop, args: {n: "{{ item }}"}}
    next: [done]
  - step: done
"""


def start(server: LocalServer, playbook: str, workload: dict[str, Any] | None = None) -> str:
    response = httpx.post(
        f"{server.url}/api/executions",
        json={"playbook": playbook, "workload": workload or {}},
        headers=bearer(server.token),
        timeout=10,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["execution_id"])


def play_worker(store: Store, count: int, *, error: str | None = None) -> None:
    """Run `count` queued tasks (failing them with `error` when given)."""
    leases = store.claim("browser-test", limit=count)
    assert len(leases) == count
    for lease in leases:
        task = lease.task
        outcome = (
            Outcome(task.task_id, ok=False, error=error, error_type="ValueError")
            if error
            else Outcome(task.task_id, ok=True, this=task.args)
        )
        assert store.complete(task.task_id, lease.token, outcome.to_payload())


def test_graph_layout_puts_steps_in_layers(page: Any, local_server: LocalServer) -> None:
    visit(page, local_server, "/ui/")
    laid = page.evaluate(
        """async () => {
          const m = await import('/ui/js/graph.js');
          const nodes = ['a', 'b', 'c', 'd', 'e'].map((id) => ({id}));
          const edges = [
            {from: 'a', to: 'b'}, {from: 'a', to: 'c'}, {from: 'b', to: 'd'},
            {from: 'c', to: 'd'}, {from: 'd', to: 'b'}, {from: 'x', to: 'a'}, {from: 'e', to: 'e'},
          ];
          const r = m.layout(nodes, edges);
          return {
            layers: Object.fromEntries([...r.positions].map(([k, p]) => [k, p.layer])),
            boxes: [...r.positions.values()].map((p) => [p.x, p.y]),
            back: r.edges.filter((e) => e.back).map((e) => e.edge.from + '>' + e.edge.to),
            drawn: r.edges.length, width: r.width, height: r.height, w: m.NODE_W, h: m.NODE_H,
          };
        }"""
    )
    assert laid["layers"] == {"a": 0, "b": 1, "c": 1, "d": 2, "e": 0}
    assert laid["back"] == ["d>b"]  # the loop back up is drawn on the side
    assert laid["drawn"] == 5  # an edge to an unknown step and a self-loop are left out
    boxes = laid["boxes"]
    for i, (x1, y1) in enumerate(boxes):
        assert x1 >= 0 and x1 + laid["w"] <= laid["width"]
        assert y1 >= 0 and y1 + laid["h"] <= laid["height"]
        for x2, y2 in boxes[i + 1 :]:
            assert abs(x1 - x2) >= laid["w"] or abs(y1 - y2) >= laid["h"], "boxes overlap"


def test_loop_progress_live_on_the_graph_and_the_step_panel(
    page: Any, local_server: LocalServer, artifacts: Path
) -> None:
    execution_id = start(local_server, LOOP)
    play_worker(local_server.store, 37)
    visit(page, local_server, f"/ui/#/executions/{execution_id}")
    items = page.locator('#graph g.node[data-step="items"]')
    page.wait_for_function(
        "() => document.querySelector('#graph g.node[data-step=items] text.sub')"
        "?.textContent === 'running · 37/100'"
    )
    assert "status-running" in (items.get_attribute("class") or "")
    assert page.locator('#graph g.node[data-step="start"]').get_attribute("data-status") == "ok"
    taken = page.locator('#graph g.edge-group[data-from="start"][data-to="items"]')
    assert taken.get_attribute("data-taken") == "true"
    assert page.locator('#graph g.edge-group[data-from="items"]').get_attribute("data-taken") == (
        "false"
    )
    items.click()
    page.wait_for_selector("#step-progress")
    assert page.locator("#step-progress").inner_text() == "37/100 done: 37 ok, 0 failed"
    assert page.locator("#attempts tbody tr").count() == 50  # a page of attempts
    assert "step=items" in page.url
    shot(page, artifacts, "loop-running")

    play_worker(local_server.store, 62)
    play_worker(local_server.store, 1, error="<b>item 99</b> broke")
    # Live: the page follows without a reload.
    page.wait_for_selector('#execution-status [data-status="fail"]')
    assert items.get_attribute("data-status") == "failed"
    assert page.locator("#graph g.node[data-step=items] text.sub").text_content() == (
        "failed · 100/100"
    )
    page.wait_for_function(
        "() => document.querySelector('#step-progress')?.textContent.includes('1 failed')"
    )
    page.select_option("#attempt-filter", "failed")
    page.wait_for_function("() => document.querySelectorAll('#attempts tbody tr').length === 1")
    row = page.locator("#attempts tbody tr")
    assert row.get_attribute("data-status") == "failed"
    assert "<b>item 99</b> broke" in row.inner_text()  # markup shown as text
    assert page.locator("#attempts b").count() == 0
    # The timeline pages through the log: the latest events, then the first ones.
    page.wait_for_function("() => document.querySelector('#events-range')?.textContent")
    last_seq = httpx.get(
        f"{local_server.url}/api/executions/{execution_id}", headers=bearer(local_server.token)
    ).json()["last_seq"]
    assert last_seq > 200
    assert page.locator("#events-range").inner_text() == (
        f"events {last_seq - 99}{DASH}{last_seq} of {last_seq}"
    )
    page.click("#events-first")
    range_is = "(text) => document.querySelector('#events-range').textContent.startsWith(text)"
    page.wait_for_function(range_is, arg=f"events 1{DASH}100 ")
    page.click("#events-next")
    page.wait_for_function(range_is, arg=f"events 101{DASH}200 ")
    assert page.locator("#timeline tbody tr").count() == 100
    page.locator("#timeline tbody tr").first.click()  # its payload unfolds
    assert page.locator("#timeline tr.payload pre").count() == 1
    shot(page, artifacts, "loop-failed")


def test_user_data_is_shown_as_text_never_run(page: Any, local_server: LocalServer) -> None:
    evil = '<img src=x onerror="window.__pwned=1">'
    text = INSTANT.replace("name: greet", f"name: '{evil}'").replace("who: World", f"who: '{evil}'")
    execution_id = start(local_server, text)
    visit(page, local_server, "/ui/#/executions")
    row = page.locator(f'tr[data-execution-id="{execution_id}"]')
    row.wait_for()
    assert evil in row.inner_text()
    visit(page, local_server, f"/ui/#/executions/{execution_id}")
    page.wait_for_selector("#execution-status [data-status=ok]")
    page.click("text=Context (results saved with as/collect)")
    assert json.loads(page.locator("#context").inner_text()) == {"greeting": {"hello": evil}}
    assert evil in page.locator("#execution-meta").inner_text()
    assert page.locator("img").count() == 0
    assert page.evaluate("() => window.__pwned") is None


def test_a_401_asks_for_a_token_and_logs_in_with_it(page: Any, local_server: LocalServer) -> None:
    sent: list[str | None] = []
    page.on("request", lambda r: sent.append(r.headers.get("authorization")))
    start(local_server, INSTANT)
    page.goto(f"{local_server.url}/ui/#/executions")  # no credential yet
    dialog = page.locator("#token-dialog")
    dialog.wait_for(state="visible")
    assert "401" in page.locator("#token-reason").inner_text()
    page.fill("#token-dialog input[name=token]", local_server.token)
    page.click("#token-dialog button[data-action=save]")
    page.wait_for_selector("#executions tbody tr[data-execution-id]")
    # The API token opened a session; the tab keeps only the session token.
    kept = page.evaluate("() => sessionStorage.getItem('noetl.api_token')")
    assert kept.startswith("noetls_") and local_server.token not in kept
    assert f"Bearer {kept}" in sent
    assert None in sent  # the first requests had none
    # Cleared from the header button: the next 401s show in the banner; polls do not
    # reopen the prompt the operator just closed.
    page.click("#token-button")
    page.click("#token-dialog button[data-action=clear]")
    assert page.evaluate("() => sessionStorage.getItem('noetl.api_token')") is None
    page.wait_for_selector("#banner:not([hidden])")
    assert "missing bearer token" in page.inner_text("#banner")
    assert dialog.is_hidden()


def test_register_a_playbook_validate_it_and_start_it_from_the_form(
    page: Any, local_server: LocalServer, artifacts: Path
) -> None:
    visit(page, local_server, "/ui/#/playbooks")
    page.click("#new-playbook")
    broken = INSTANT.replace("- step: start", "- step: start\n    next: [nowhere]")
    page.fill("#playbook-input", broken)
    page.click("#validate")
    page.wait_for_selector("#editor-result .line.has-error")
    assert page.locator("#validation").inner_text() == "1 error."
    marked = page.locator("#editor-result .line.has-error")
    assert marked.get_attribute("data-line") == "10"
    assert "nowhere" in page.locator("#editor-result .diag.error").inner_text()
    shot(page, artifacts, "editor-error")
    page.fill("#playbook-input", INSTANT)
    page.click("#validate")
    page.wait_for_function("() => document.querySelector('#validation')?.textContent === 'Valid.'")
    page.click("#register")
    page.wait_for_selector("#start-form")
    assert "path=demo%2Fgreet" in page.url and "version=1" in page.url
    assert page.locator("#playbook-text .line").count() == len(INSTANT.splitlines())
    page.click("#workload-as-json")  # the fields of its workload, as JSON
    page.fill("#workload-input", "[1, 2]")
    page.click("#start")
    page.wait_for_selector("#start-message .notice.error")
    assert "must be a JSON object" in page.locator("#start-message").inner_text()
    page.fill("#workload-input", '{"who": "Ada"}')
    shot(page, artifacts, "start-form")
    page.click("#start")
    page.wait_for_selector("#execution-status [data-status=ok]")
    page.click("text=Context (results saved with as/collect)")
    assert json.loads(page.locator("#context").inner_text()) == {"greeting": {"hello": "Ada"}}
    assert page.locator("#banner").is_hidden()
    # The catalog lists it; a new version shows up in the version picker.
    httpx.post(
        f"{local_server.url}/api/playbooks",
        json={"content": INSTANT.replace("World", "Everyone")},
        headers=bearer(local_server.token),
        timeout=10,
    )
    visit(page, local_server, "/ui/#/playbooks")
    page.wait_for_selector('#playbooks tr[data-path="demo/greet"]')
    page.click('#playbooks a:text("demo/greet")')
    page.wait_for_selector("#version")
    assert page.locator("#version option").all_inner_texts() == ["v2 (latest)", "v1"]
    page.select_option("#version", "1")
    page.wait_for_function("() => document.querySelector('#start')?.textContent === 'Start v1'")


def test_cancel_from_the_execution_page(page: Any, local_server: LocalServer) -> None:
    execution_id = start(local_server, LOOP)
    visit(page, local_server, f"/ui/#/executions/{execution_id}")
    page.click("#cancel")
    page.click("dialog.confirm button:text('Cancel execution')")
    page.wait_for_selector("#execution-status [data-status=canceled]")
    assert page.locator("#cancel").count() == 0
    assert "Cancel requested." in page.locator("#execution-message").inner_text()
    assert page.locator('#graph g.node[data-step="items"]').get_attribute("data-status") == (
        "canceled"
    )


def test_the_list_updates_live_and_filters_by_status(page: Any, local_server: LocalServer) -> None:
    first = start(local_server, INSTANT)
    visit(page, local_server, "/ui/#/executions")
    page.wait_for_selector(f'tr[data-execution-id="{first}"]')
    running = start(local_server, LOOP)  # no worker: it stays running
    page.wait_for_selector(f'tr[data-execution-id="{running}"]')  # without a reload
    page.click("a[data-filter=running]")
    page.wait_for_function("() => document.querySelectorAll('#executions tbody tr').length === 1")
    assert page.locator("#executions tbody tr").get_attribute("data-execution-id") == running
    assert "status=running" in page.url
    page.click(f'a:text("{running}")')
    page.wait_for_selector("#execution-status [data-status=running]")


def test_mark_a_stuck_step_done(page: Any, local_server: LocalServer) -> None:
    execution_id = start(local_server, LOOP)  # no worker: `items` stays running
    visit(page, local_server, f"/ui/#/executions/{execution_id}?step=items")
    page.wait_for_selector("#force-complete")
    page.click("#force-complete")
    page.fill("#force-result", "not json")
    page.click("dialog.confirm button:text('Mark done')")
    assert "not valid JSON" in page.locator("dialog.confirm [role=alert]").inner_text()
    page.fill("#force-result", "[1, 2]")
    page.fill("#force-reason", "the upstream export was loaded by hand")
    page.click("dialog.confirm button:text('Mark done')")
    page.wait_for_selector("#execution-status [data-status=ok]")
    assert "Step items marked ok." in page.inner_text("#step-message")
    # The graph is redrawn by its own poll: wait for it rather than read it at once.
    page.wait_for_function(
        "() => [...document.querySelectorAll('#graph g.node')].map(e => e.dataset.status)"
        ".join() === 'ok,ok,ok'"
    )
    page.wait_for_function("() => !document.querySelector('#force-complete')")
    assert json.loads(page.inner_text("#step-result")) == [1, 2]
    page.select_option("#event-type", "step.force_completed")
    page.wait_for_selector("#timeline tr[data-type='step.force_completed']")
    assert "marked ok by api: the upstream export was loaded by hand" in page.inner_text(
        "#timeline"
    )


def test_unknown_things_say_so(page: Any, local_server: LocalServer) -> None:
    visit(page, local_server, "/ui/#/executions/no-such-execution")
    page.wait_for_selector("h1:text('Execution not found')")
    assert "no-such-execution" in page.inner_text("main [role=alert]")
    visit(page, local_server, "/ui/#/nowhere")
    page.wait_for_selector("h1:text('Not found')")
    # A server from before the dead-letter API answers 404 for its routes.
    page.route(
        "**/api/dlq**",
        lambda route: route.fulfill(
            status=404,
            content_type="application/json",
            body='{"error": "not_found", "message": "Not Found"}',
        ),
    )
    visit(page, local_server, "/ui/#/dlq")
    page.wait_for_selector("main [role=alert]")
    assert "This server has no dead-letter API" in page.inner_text("main")
    assert page.locator("#dlq-pending").is_hidden()
