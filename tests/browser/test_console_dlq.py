"""The dead-letter pages against the API contract (docs/operations.md, "Dead letters").

The DLQ answers here come from a stand-in that follows the contract (Playwright serves
them in place of the server's), so the page's own behaviour is pinned down: filters,
details, confirmations, the replay patch and the discard reason it sends, errors it shows.
The end-to-end test (test_console_e2e.py) runs the same page against the real API.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from tests.browser.conftest import LocalServer, shot, visit

pytestmark = pytest.mark.slow

FETCH = "1764130000000123456.fetch"
ITEM = "1764130000000123456.items.7"
STALE = "1764130000000999999.load"
DETAIL_ONLY = ("payload", "context_excerpt", "last_stack")  # not in list items


def entry(message_id: str, step: str, **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "message_id": message_id,
        "execution_id": message_id.split(".", maxsplit=1)[0],
        "step": step,
        "loop_index": None,
        "loop_key": None,
        "tool_kind": "http",
        "sink_id": None,
        "attempts": 3,
        "reason": "exhausted",
        "error_type": "HTTPError",
        "last_error": "GET http://api.internal/users failed: 503 <b>Service Unavailable</b>",
        "last_stack": 'Traceback (most recent call last):\n  File "http.py", line 9\nHTTPError',
        "first_seen": 1764130000.5,
        "last_seen": 1764130012.25,
        "status": "pending",
        "replays": 0,
        "discard_reason": None,
        "payload": {
            "kind": "http",
            "spec": {"url": "http://api.internal/users", "headers": {"Authorization": "***"}},
            "args": {},
            "key": f"{message_id.split('.', maxsplit=1)[0]}:{step}",
            "index": None,
            "attempt": 3,
            "timeout_ms": None,
        },
        "context_excerpt": '{"workload": {"token": "***"}}',
    }
    base.update(changes)
    return base


class FakeDlq:
    """The DLQ API of the contract, in memory; records what the page sends."""

    def __init__(self) -> None:
        self.entries = {
            FETCH: entry(FETCH, "fetch"),
            ITEM: entry(ITEM, "items", loop_index=7, loop_key="user-7", tool_kind="python"),
            STALE: entry(STALE, "load", status="pending"),
        }
        self.queries: list[dict[str, list[str]]] = []
        self.posts: list[tuple[str, Any]] = []

    @property
    def lists(self) -> list[dict[str, list[str]]]:
        """The list requests of the DLQ page (the top bar asks for one row, for counts)."""
        return [q for q in self.queries if q["limit"] != ["1"]]

    def reply(self, route: Any, status: int, body: Any) -> None:
        route.fulfill(status=status, content_type="application/json", body=json.dumps(body))

    def __call__(self, route: Any) -> None:
        request = route.request
        url = urlsplit(request.url)
        parts = [unquote(p) for p in url.path.split("/")[3:]]  # after /api/dlq
        if request.method == "GET" and not parts:
            query = parse_qs(url.query)
            self.queries.append(query)
            items = [
                {k: v for k, v in e.items() if k not in DETAIL_ONLY}
                for e in self.entries.values()
                if e["status"] == query.get("status", [e["status"]])[0]
                and e["execution_id"] == query.get("execution_id", [e["execution_id"]])[0]
            ]
            limit, offset = int(query["limit"][0]), int(query.get("offset", ["0"])[0])
            page = items[offset : offset + limit]
            counts = {s: 0 for s in ("pending", "replayed", "discarded")}
            for e in self.entries.values():
                counts[e["status"]] += 1
            body = {"items": page, "limit": limit, "offset": offset, "counts": counts}
            self.reply(route, 200, body)
            return
        found = self.entries.get(parts[0])
        if found is None:
            self.reply(route, 404, {"error": "not_found", "message": f"no DLQ entry {parts[0]}"})
            return
        if request.method == "GET":
            self.reply(route, 200, found)
            return
        body = json.loads(request.post_data or "{}")
        self.posts.append((f"{parts[1]} {parts[0]}", body))
        if parts[0] == STALE:
            self.reply(route, 409, {"error": "conflict", "message": "the execution was canceled"})
        elif parts[1] == "replay":
            found.update(status="replayed", replays=found["replays"] + 1)
            answer = {"message_id": parts[0], "replayed": True, "status": "running"}
            self.reply(route, 200, {**answer, "execution_id": found["execution_id"]})
        else:
            found.update(status="discarded", discard_reason=body["reason"])
            self.reply(route, 200, copy.deepcopy(found))


@pytest.fixture
def dlq(page: Any) -> FakeDlq:
    fake = FakeDlq()
    page.route("**/api/dlq**", fake)
    return fake


def test_list_filter_and_details(
    page: Any, local_server: LocalServer, dlq: FakeDlq, artifacts: Path
) -> None:
    visit(page, local_server, "/ui/#/dlq")
    page.wait_for_selector(f'#dlq tr[data-message-id="{FETCH}"]')
    assert page.locator("#dlq tbody tr").count() == 3
    assert dlq.lists[0]["status"] == ["pending"]  # pending first: what needs a decision
    counts = page.locator("nav.tabs .count").all_inner_texts()
    assert counts == ["3", "0", "0", "3"]  # pending, replayed, discarded, all
    page.wait_for_function("() => document.querySelector('#dlq-pending').textContent === '3'")
    row = page.locator(f'#dlq tr[data-message-id="{ITEM}"]')
    assert "items" in row.inner_text() and "7" in row.inner_text()
    fetch = page.locator(f'#dlq tr[data-message-id="{FETCH}"]')
    assert "503 <b>Service Unavailable</b>" in fetch.inner_text()
    shot(page, artifacts, "dlq-list")

    page.fill("#dlq-execution", "1764130000000999999")
    page.click("form.toolbar button[type=submit]")
    page.wait_for_function(
        "() => document.querySelectorAll('#dlq tbody tr[data-message-id]').length === 1"
    )
    assert dlq.lists[-1]["execution_id"] == ["1764130000000999999"]
    assert "execution_id=1764130000000999999" in page.url

    visit(page, local_server, f"/ui/#/dlq/{FETCH}")
    page.wait_for_selector("#dlq-payload")
    assert json.loads(page.locator("#dlq-payload").inner_text())["spec"]["headers"] == {
        "Authorization": "***"
    }
    assert "<b>Service Unavailable</b>" in page.locator("#dlq-error").inner_text()
    page.click("summary:text('Stack')")
    assert "Traceback" in page.locator("#dlq-stack").inner_text()
    assert page.locator("b").count() == 0
    shot(page, artifacts, "dlq-entry")


def test_replay_asks_first_and_sends_the_patch(
    page: Any, local_server: LocalServer, dlq: FakeDlq, artifacts: Path
) -> None:
    visit(page, local_server, f"/ui/#/dlq/{FETCH}")
    page.click("#replay")
    page.click("dialog.confirm button:text('Cancel')")  # changed its mind: nothing sent
    assert dlq.posts == []
    page.click("#replay")
    page.fill("#replay-patch", "{not json")
    page.click("dialog.confirm button:text('Replay')")
    assert "not valid JSON" in page.locator("dialog.confirm [role=alert]").inner_text()
    page.fill("#replay-patch", '["a list"]')
    page.click("dialog.confirm button:text('Replay')")
    assert "JSON object" in page.locator("dialog.confirm [role=alert]").inner_text()
    page.fill("#replay-patch", '{"spec.url": "http://api.internal/v2/users"}')
    shot(page, artifacts, "replay-dialog")
    page.click("dialog.confirm button:text('Replay')")
    page.wait_for_selector("#replayed-execution")
    assert dlq.posts == [
        (f"replay {FETCH}", {"patch": {"spec.url": "http://api.internal/v2/users"}})
    ]
    assert "Replayed; the execution is running." in page.locator("#dlq-message").inner_text()
    link = page.locator("#replayed-execution").get_attribute("href")
    assert link == "#/executions/1764130000000123456"
    page.wait_for_selector("#replay[disabled]")  # replayed: no second replay from here
    assert page.locator("#discard").is_disabled()

    visit(page, local_server, f"/ui/#/dlq/{ITEM}")
    page.click("#replay")
    page.click("dialog.confirm button:text('Replay')")  # no patch: an empty body
    page.wait_for_selector("#replayed-execution")
    assert dlq.posts[-1] == (f"replay {ITEM}", {})


def test_discard_needs_a_reason_and_refusals_are_shown(
    page: Any, local_server: LocalServer, dlq: FakeDlq
) -> None:
    visit(page, local_server, f"/ui/#/dlq/{ITEM}")
    page.click("#discard")
    page.click("dialog.confirm button:text('Discard')")
    assert "Say why" in page.locator("dialog.confirm [role=alert]").inner_text()
    assert dlq.posts == []
    page.fill("#discard-reason", "bad input row, fixed upstream")
    page.click("dialog.confirm button:text('Discard')")
    page.wait_for_selector("#dlq-message .notice.ok")
    assert dlq.posts == [(f"discard {ITEM}", {"reason": "bad input row, fixed upstream"})]
    page.wait_for_selector("[data-status=discarded]")
    assert "fixed upstream" in page.inner_text("main")

    visit(page, local_server, f"/ui/#/dlq/{STALE}")
    page.click("#replay")
    page.click("dialog.confirm button:text('Replay')")
    page.wait_for_selector("#dlq-message .notice.error")
    assert "Replay refused: the execution was canceled" in page.inner_text("#dlq-message")

    visit(page, local_server, "/ui/#/dlq/no.such.task")
    page.wait_for_selector("main [role=alert]")
    assert "no DLQ entry no.such.task" in page.inner_text("main")
