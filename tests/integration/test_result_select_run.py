"""`result.select` and the `artifact` tool in `noetl run` (embedded, SQLite): the whole
results go to the result store, the event log keeps selections, and the artifact tool
reads a whole result back."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.helpers.cli import noetl
from tests.helpers.select_playbook import EXPECTED_VERDICT, SELECT_PLAYBOOK, big_events


def test_selected_results_stay_out_of_the_event_log(tmp_path: Path) -> None:
    playbook = tmp_path / "select.yaml"
    playbook.write_text(SELECT_PLAYBOOK)
    db = tmp_path / "noetl.db"
    proc = noetl("run", playbook, "--db", db, "--json", cwd=tmp_path, no_traceback=True)
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(db) as conn:
        [(context,)] = conn.execute("SELECT context FROM execution").fetchall()
        events = [
            {"type": t, "step": s, "payload": json.loads(p)}
            for t, s, p in conn.execute("SELECT type, step, payload FROM event_log ORDER BY seq")
        ]
        kept = conn.execute("SELECT step, bytes FROM result_store ORDER BY step").fetchall()
    saved = json.loads(context)
    assert saved["verdict"] == EXPECTED_VERDICT
    assert set(saved["big"]) == {"status", "count", "_ref", "_store", "_bytes"}
    assert big_events(events) == [("tool.processed", "load")]
    # one whole result of `start`, one per loop item of `pages`
    assert [step for step, _ in kept] == ["pages", "pages", "pages", "start"]
    assert all(size > 100_000 for _, size in kept)
