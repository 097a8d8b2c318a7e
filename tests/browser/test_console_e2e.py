"""The console end to end: a real `noetl server start` and `noetl worker start` over a
fresh PostgreSQL database, driven from a headless Chromium.

A small HTTP server in the test plays an upstream API: `/ok` answers 200 with a list,
`/broken` answers 500 (a retryable failure, until the attempts run out).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import shot, visit
from tests.distributed.cluster import Cluster

pytestmark = [pytest.mark.services, pytest.mark.slow]

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: squares
  path: e2e/squares
workload:
  source: http://127.0.0.1:9/ok
workflow:
  - step: fetch
    tool:
      kind: http
      url: "{{ workload.source }}"
      retry: {max_attempts: 2, initial_delay: 0.1, jitter: false}
    result: {as: fetched}
    next: [square]
  - step: square
    loop:
      collection: "{{ fetched.data['numbers'] }}"
      mode: parallel
    tool:
      kind: python
      code: |
        def main(context, args):
            return args["n"] * args["n"]
      args: {n: "{{ item }}"}
    result: {collect: {into: squares, mode: list}}
    next: [report]
  - step: report
    when: "{{ loop_done('square') }}"
    result:
      pick: "{{ {'total': squares | sum} }}"
      as: report
"""


class Upstream(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/ok":
            body, status = json.dumps({"numbers": [1, 2, 3]}).encode(), 200
        else:
            body, status = b'{"error": "upstream is down"}', 500
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path) -> Iterator[Cluster]:
    running = Cluster(db=pg_database, workdir=tmp_path)
    try:
        running.start_server()
        running.start_worker("worker", lease_s=5)
        yield running
    finally:
        running.stop_all()


def register_from_the_editor(page: Any, cluster: Cluster) -> None:
    visit(page, cluster, "/ui/#/playbooks/new")
    page.fill("#playbook-input", PLAYBOOK)
    page.click("#register")
    page.wait_for_selector("#start-form")


def start_from_the_form(page: Any, workload: dict[str, Any]) -> str:
    page.click("#workload-as-json")  # the playbook's workload has fields: the JSON box
    page.fill("#workload-input", json.dumps(workload))
    page.click("#start")
    page.wait_for_selector("#execution-id")
    return str(page.locator("#execution-id").inner_text())


def test_start_from_the_form_and_watch_it_finish_on_the_graph(
    page: Any, cluster: Cluster, upstream: str, artifacts: Path
) -> None:
    visit(page, cluster, "/ui/#/executions")
    page.wait_for_function(
        "() => document.querySelector('#workers')?.textContent === '1 worker alive'"
    )
    register_from_the_editor(page, cluster)
    execution_id = start_from_the_form(page, {"source": f"{upstream}/ok"})
    page.wait_for_selector("#execution-status [data-status=ok]", timeout=60_000)
    nodes = page.locator("#graph g.node").evaluate_all(
        "els => els.map(e => [e.dataset.step, e.dataset.status])"
    )
    assert nodes == [["fetch", "ok"], ["square", "ok"], ["report", "ok"]]
    caption = page.locator('#graph g.node[data-step="square"] text.sub').text_content()
    assert caption == "ok · 3/3"
    taken = page.locator("#graph g.edge-group").evaluate_all("els => els.map(e => e.dataset.taken)")
    assert taken == ["true", "true"]
    page.click("text=Context (results saved with as/collect)")
    context = json.loads(page.locator("#context").inner_text())
    assert context["report"] == {"total": 14}
    shot(page, artifacts, "finished")
    assert page.locator("#banner").is_hidden()  # no request failed on the way
    assert cluster.execution(execution_id)["status"] == "ok"


def test_a_failure_goes_to_the_dlq_and_is_replayed_from_the_console(
    page: Any, cluster: Cluster, upstream: str, artifacts: Path
) -> None:
    register_from_the_editor(page, cluster)
    execution_id = start_from_the_form(page, {"source": f"{upstream}/broken"})
    # Two attempts against a server answering 500, then the task is dead-lettered.
    page.wait_for_selector("#execution-status [data-status=fail]", timeout=60_000)
    fetch = page.locator('#graph g.node[data-step="fetch"]')
    assert fetch.get_attribute("data-status") == "failed"
    assert page.locator('#graph g.node[data-step="square"]').get_attribute("data-status") == (
        "skipped"
    )
    assert "500" in page.locator("#execution-error").inner_text() or "500" in page.inner_text(
        "#steps"
    )
    fetch.click()
    page.wait_for_selector("#attempts a.dlq-link")
    attempts = page.locator("#attempts tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.attempt, r.dataset.status])"
    )
    assert attempts == [["1", "failed"], ["2", "failed"]]
    shot(page, artifacts, "failed")
    page.wait_for_function("() => document.querySelector('#dlq-pending')?.textContent === '1'")

    page.click("#attempts a.dlq-link")
    page.wait_for_selector("#dlq-payload")
    message_id = page.locator("#dlq-id").inner_text()
    assert message_id == f"{execution_id}.fetch"
    assert json.loads(page.locator("#dlq-payload").inner_text())["spec"]["url"] == (
        f"{upstream}/broken"
    )
    assert "500" in page.locator("#dlq-error").inner_text()
    shot(page, artifacts, "dead-letter")

    page.click("#replay")
    page.fill("#replay-patch", json.dumps({"spec.url": f"{upstream}/ok"}))
    page.click("dialog.confirm button:text('Replay')")
    page.wait_for_selector("#replayed-execution")
    assert "Replayed" in page.locator("#dlq-message").inner_text()
    page.wait_for_selector("[data-status=replayed]")
    page.click("#replayed-execution")

    page.wait_for_selector("#execution-status [data-status=ok]", timeout=60_000)
    nodes = page.locator("#graph g.node").evaluate_all("els => els.map(e => e.dataset.status)")
    assert nodes == ["ok", "ok", "ok"]
    page.click("text=Context (results saved with as/collect)")
    assert json.loads(page.locator("#context").inner_text())["report"] == {"total": 14}
    fetch.click()
    page.wait_for_function("() => document.querySelectorAll('#attempts tbody tr').length === 3")
    last = page.locator("#attempts tbody tr").last
    assert last.get_attribute("data-status") == "ok"
    assert "replayed from the dead-letter queue" in last.inner_text()
    shot(page, artifacts, "replayed")
    page.wait_for_function("() => document.querySelector('#dlq-pending')?.hidden === true")
    assert page.locator("#banner").is_hidden()
    assert cluster.execution(execution_id)["status"] == "ok"
