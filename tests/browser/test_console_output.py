"""The step page shows what each attempt printed, under the attempt (the worker is
played with the store's queue; the outcomes carry the output a real worker reports)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from noetl.core import Outcome
from tests.browser.conftest import LocalServer, shot, visit
from tests.browser.test_console_pages import start

pytestmark = pytest.mark.slow

LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: printing}
workflow:
  - step: start
    next: [items]
  - step: items
    loop: {in: [1, 2], iterator: n}
    tool: {kind: noop, args: {n: "{{ n }}"}}
"""


def test_the_step_page_shows_each_attempts_output(
    page: Any, local_server: LocalServer, artifacts: Path
) -> None:
    store = local_server.store
    execution_id = start(local_server, LOOP)
    for _ in range(2):  # the loop runs its items one after the other
        leases: list[Any] = []
        for _ in range(200):
            leases = store.claim("browser-test", limit=1)
            if leases:
                break
            page.wait_for_timeout(50)
        (lease,) = leases
        n = lease.task.args["n"]
        ok = n == 1
        outcome = Outcome(
            lease.task.task_id,
            ok=ok,
            this=n if ok else None,
            error=None if ok else "ValueError: bad item",
            error_type=None if ok else "ValueError",
            stdout=f"reading item {n}\nitem {n} has 3 rows\n" if ok else "reading item 2\n",
        )
        assert store.complete(lease.task.task_id, lease.token, outcome.to_payload())

    visit(page, local_server, f"/ui/#/executions/{execution_id}")
    page.locator('#graph g.node[data-step="items"]').click()
    page.wait_for_selector("#attempts tbody tr details.step-output")
    rows = page.locator("#attempts tbody tr")
    assert rows.count() == 2
    first, second = rows.nth(0), rows.nth(1)
    # Folded for an attempt that succeeded, open for one that failed.
    assert first.locator("details.step-output summary").inner_text() == "output (2 lines)"
    assert first.locator("details.step-output").get_attribute("open") is None
    assert second.locator("details.step-output").get_attribute("open") is not None
    assert second.locator("pre.output-text").inner_text().strip() == "reading item 2"
    first.locator("details.step-output summary").click()
    text = first.locator("pre.output-text").inner_text()
    assert text.splitlines() == ["reading item 1", "item 1 has 3 rows"]
    shot(page, artifacts, "step-output")
