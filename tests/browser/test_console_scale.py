"""The console over 10,000 executions: `noetl ui` on a SQLite file, paged by the server.

The rows are written straight into the tables (one transaction), the way 10,000 runs of
`noetl run` would have left them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from noetl.store import SqliteStore
from tests.browser.conftest import shot, visit
from tests.distributed.cluster import Cluster, free_port, wait_until
from tests.helpers.auth import token_in_database

pytestmark = pytest.mark.slow

COUNT = 10_000
PAGE = 50
DASH = "\u2013"  # the en dash of "rows 1-50"
TEXT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: nightly}
workflow:
  - step: extract
    next: [load]
  - step: load
"""


def status_of(i: int) -> str:
    return "fail" if i % 10 == 3 else "running" if i % 1000 == 7 else "ok"


def fill_database(path: Path) -> list[str]:
    """10,000 executions, newest first in the returned ids."""
    SqliteStore(path).close()  # creates the schema
    base = 1_700_000_000.0
    rows = []
    for i in range(COUNT):
        created = base + i
        status = status_of(i)
        finished = None if status == "running" else created + 2.5
        rows.append((f"exec-{i:05d}", f"nightly-{i % 7}", status, created, finished))
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO execution (execution_id, playbook_name, playbook_path, status, "
            "created_at, updated_at, finished_at) VALUES (?, ?, 'jobs/nightly', ?, ?, ?, ?)",
            [(e, n, s, c, f or c, f) for e, n, s, c, f in rows],
        )
        conn.executemany(
            "INSERT INTO execution_input (execution_id, playbook_text, workload) VALUES (?, ?, ?)",
            [(row[0], TEXT, json.dumps({"day": row[0]})) for row in rows],
        )
    return [row[0] for row in reversed(rows)]


@pytest.fixture
def console(tmp_path: Path) -> Iterator[tuple[Cluster, list[str]]]:
    db = tmp_path / "big.db"
    ids = fill_database(db)
    cluster = Cluster(db=str(db), workdir=tmp_path)
    cluster.port = free_port()
    cluster.token = token_in_database(str(db))
    proc = cluster._spawn("ui", "ui", "--db", str(db), "--port", str(cluster.port))
    try:
        wait_until(lambda: cluster._healthy(cluster.port), 30, "noetl ui")
        yield cluster, ids
    finally:
        cluster.stop_all()
    assert proc.popen.returncode == 0, proc.output()


def shown(page: Any) -> list[str]:
    return list(
        page.eval_on_selector_all(
            "#executions tbody tr[data-execution-id]",
            "rows => rows.map(r => r.dataset.executionId)",
        )
    )


def wait_for_rows(page: Any, first: str) -> list[str]:
    page.wait_for_function(
        "(first) => document.querySelector('#executions tbody tr')?.dataset.executionId === first",
        arg=first,
    )
    return shown(page)


def test_ten_thousand_executions_page_on_the_server(
    page: Any, console: tuple[Cluster, list[str]], artifacts: Path
) -> None:
    cluster, ids = console
    lists: list[dict[str, list[str]]] = []

    def record(request: Any) -> None:
        url = urlsplit(request.url)
        if url.path == "/api/executions":
            lists.append(parse_qs(url.query))

    page.on("request", record)
    visit(page, cluster, "/ui/#/executions")
    first = wait_for_rows(page, ids[0])
    assert first == ids[:PAGE]
    assert page.locator("#range").inner_text() == f"rows 1{DASH}50"
    shot(page, artifacts, "executions-page-1")

    page.click("#older")
    second = wait_for_rows(page, ids[PAGE])
    assert second == ids[PAGE : 2 * PAGE]
    assert not set(first) & set(second)
    assert "page=2" in page.url

    visit(page, cluster, f"/ui/#/executions?page={COUNT // PAGE}")
    last = wait_for_rows(page, ids[-PAGE])
    assert last == ids[-PAGE:]
    page.wait_for_function("() => document.querySelector('#older').disabled")
    assert page.locator("#range").inner_text() == f"rows {COUNT - PAGE + 1}{DASH}{COUNT}"

    page.click("a[data-filter=fail]")
    failed = [i for i in ids if status_of(int(i.split("-")[1])) == "fail"]
    assert wait_for_rows(page, failed[0]) == failed[:PAGE]
    badges = page.eval_on_selector_all(
        "#executions tbody [data-status]", "els => els.map(e => e.dataset.status)"
    )
    assert badges == ["fail"] * PAGE
    page.click("#older")
    assert wait_for_rows(page, failed[PAGE]) == failed[PAGE : 2 * PAGE]

    # Nothing asked for more than a page (plus the row that says a next page exists).
    assert lists
    assert all(int(q["limit"][0]) <= PAGE for q in lists), lists
    assert {q.get("offset", ["0"])[0] for q in lists} >= {"0", "50", "9950"}

    # An execution of the lot opens (rows without events: its steps are pending).
    page.click(f'a:text("{failed[PAGE]}")')
    page.wait_for_selector('#graph g.node[data-step="load"]')
    assert page.locator("#graph g.node").evaluate_all("els => els.map(e => e.dataset.status)") == [
        "pending",
        "pending",
    ]
    assert "nightly-" in page.locator("#execution-meta").inner_text()
    shot(page, artifacts, "one-of-ten-thousand")
