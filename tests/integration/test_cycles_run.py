"""A cycle of the graph in `noetl run` (embedded, SQLite): a playbook pages through a real
HTTP API on loopback with `fetch -> check -> fetch` until the API says there is no next
page; each pass is a new run of `fetch` and `check`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.helpers.cli import noetl
from tests.helpers.loopback import base_url, serving
from tests.helpers.paging import EXPECTED_REPORT, PAGES, PagingHandler, paging_playbook


def test_a_back_edge_pages_through_an_api_until_it_is_done(tmp_path: Path) -> None:
    db = tmp_path / "noetl.db"
    with serving(PagingHandler) as server:
        playbook = tmp_path / "paging.yaml"
        playbook.write_text(paging_playbook(base_url(server)))
        proc = noetl("run", playbook, "--db", db, "--json", cwd=tmp_path, no_traceback=True)
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(db) as conn:
        [(context,)] = conn.execute("SELECT context FROM execution").fetchall()
        called = [
            json.loads(payload)
            for (payload,) in conn.execute(
                "SELECT payload FROM event_log WHERE type = 'step.called' AND step = 'fetch' "
                "ORDER BY seq"
            )
        ]
        summary = dict(conn.execute("SELECT step, status FROM step_state").fetchall())
    assert json.loads(context)["report"] == EXPECTED_REPORT
    assert [c.get("run") for c in called] == [None, *range(2, PAGES + 1)]
    assert json.loads(summary["fetch"]) == {"status": "ok", "run": PAGES}
