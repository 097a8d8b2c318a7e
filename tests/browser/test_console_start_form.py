"""The start form of a playbook: a field per workload key, typed from its default, and the
JSON box behind "Edit as JSON", in a real browser over a server in this process (SQLite)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.conftest import LocalServer, shot, visit
from tests.helpers.auth import bearer

pytestmark = pytest.mark.slow

TYPED = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: typed, path: demo/typed}
workload:
  count: 3
  ratio: 0.5
  verbose: false
  who: World
  note: "two\\nlines"
  tags: [a, b]
  options: {depth: 1}
  db_password: hunter2
workflow:
  - step: start
    result:
      pick: >-
        {{ {'count': workload.count, 'ratio': workload.ratio, 'verbose': workload.verbose,
            'who': workload.who, 'tags': workload.tags, 'options': workload.options,
            'extra': workload.extra | default(none),
            'same': workload.db_password == 'hunter2'} }}
      as: got
"""


def register(server: LocalServer, text: str) -> None:
    response = httpx.post(
        f"{server.url}/api/playbooks",
        json={"content": text},
        headers=bearer(server.token),
        timeout=10,
    )
    assert response.status_code == 201, response.text


def started_with(page: Any) -> dict[str, Any]:
    """Press Start; the workload the request sent, and the context the execution saved."""
    with page.expect_request(
        lambda r: r.url.endswith("/api/executions") and r.method == "POST"
    ) as request:
        page.click("#start")
    sent = request.value.post_data_json["workload"]
    page.wait_for_selector("#execution-status [data-status=ok]")
    page.click("text=Context (results saved with as/collect)")
    return {"sent": sent, "got": json.loads(page.locator("#context").inner_text())["got"]}


def field(page: Any, key: str) -> Any:
    return page.locator(f'#workload-fields [data-key="{key}"] :is(input, textarea)')


def test_a_field_per_workload_key_typed_from_its_default(
    page: Any, local_server: LocalServer, artifacts: Path
) -> None:
    register(local_server, TYPED)
    visit(page, local_server, "/ui/#/playbooks/view?path=demo%2Ftyped")
    page.wait_for_selector("#workload-fields")
    kinds = page.locator("#workload-fields [data-kind]").evaluate_all(
        "els => els.map(e => [e.dataset.key, e.dataset.kind, e.type])"
    )
    assert kinds == [
        ["count", "number", "number"],
        ["ratio", "number", "number"],
        ["verbose", "boolean", "checkbox"],
        ["who", "text", "text"],
        ["note", "text", "textarea"],
        ["tags", "json", "textarea"],
        ["options", "json", "textarea"],
        ["db_password", "secret", "password"],
    ]
    assert field(page, "count").input_value() == "3"
    assert field(page, "note").input_value() == "two\nlines"  # not sent: unchanged
    assert field(page, "db_password").input_value() == ""  # never the masked value
    assert page.locator("#workload-input").is_hidden()
    field(page, "count").fill("42")
    field(page, "ratio").fill("2.5")
    field(page, "verbose").check()
    field(page, "who").fill("Ada")
    field(page, "tags").fill('["x", 7]')
    shot(page, artifacts, "start-fields")
    run = started_with(page)
    # Typed as the defaults are; only what changed is sent, the secret default is kept.
    assert run["sent"] == {
        "count": 42,
        "ratio": 2.5,
        "verbose": True,
        "who": "Ada",
        "tags": ["x", 7],
    }
    assert run["got"] == {
        "count": 42,
        "ratio": 2.5,
        "verbose": True,
        "who": "Ada",
        "tags": ["x", 7],
        "options": {"depth": 1},
        "extra": None,
        "same": True,
    }


def test_edit_as_json_and_back_and_what_is_not_valid(page: Any, local_server: LocalServer) -> None:
    register(local_server, TYPED)
    visit(page, local_server, "/ui/#/playbooks/view?path=demo%2Ftyped")
    page.wait_for_selector("#workload-fields")
    field(page, "count").fill("5")
    page.click("#workload-as-json")
    # The JSON box starts from what the fields changed.
    assert json.loads(page.locator("#workload-input").input_value()) == {"count": 5}
    assert page.locator("#workload-fields").is_hidden()
    page.fill("#workload-input", '{"count": 9, "extra": "more", "verbose": true}')
    page.click("#workload-as-json")  # back to the fields, which take the JSON's values
    assert field(page, "count").input_value() == "9"
    assert field(page, "verbose").is_checked()
    assert "extra" in page.locator("#workload-extras").inner_text()
    field(page, "options").fill("{not json")
    page.click("#start")
    page.wait_for_selector("#start-message .notice.error")
    assert "options: not valid JSON" in page.locator("#start-message").inner_text()
    field(page, "options").fill('{"depth": 2}')
    run = started_with(page)
    assert run["sent"] == {"count": 9, "extra": "more", "verbose": True, "options": {"depth": 2}}
    assert (run["got"]["count"], run["got"]["extra"], run["got"]["options"]) == (
        9,
        "more",
        {"depth": 2},
    )
