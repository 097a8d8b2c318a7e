"""Large results without `result.select` in `noetl run` (embedded, SQLite): the worker
spills them to the result store, the event log keeps small envelopes, a later step reads
a small field directly and the whole result through the `artifact` tool."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.helpers.cli import noetl
from tests.helpers.spill_playbook import EXPECTED_VERDICT, ROWS, SPILL_PLAYBOOK, big_events


def test_large_results_are_spilled_out_of_the_event_log(tmp_path: Path) -> None:
    playbook = tmp_path / "spill.yaml"
    playbook.write_text(SPILL_PLAYBOOK)
    db = tmp_path / "noetl.db"
    proc = noetl("run", playbook, "--db", db, "--json", cwd=tmp_path, no_traceback=True)
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(db) as conn:
        [(context,)] = conn.execute("SELECT context FROM execution").fetchall()
        rows = conn.execute("SELECT type, step, payload FROM event_log ORDER BY seq").fetchall()
        kept = conn.execute("SELECT step, bytes FROM result_store ORDER BY step").fetchall()
    events = [{"type": t, "step": s, "payload": json.loads(p)} for t, s, p in rows]
    saved = json.loads(context)
    assert saved["verdict"] == EXPECTED_VERDICT
    assert set(saved["big"]) == {"status", "count", "_ref", "_store", "_bytes", "_spilled"}
    [processed] = [p for t, s, p in rows if t == "tool.processed" and s == "start"]
    assert len(processed) < 20_000
    assert big_events(events) == [("tool.processed", "load")]
    # the whole result of `start`, one per loop item of `pages`
    assert [step for step, _ in kept] == ["pages", "pages", "start"]
    assert kept[-1][1] > ROWS * 1000


def test_the_inline_limit_is_a_setting(tmp_path: Path) -> None:
    # the first step alone, its result under a limit of 4 MiB
    playbook = tmp_path / "spill.yaml"
    playbook.write_text(SPILL_PLAYBOOK.replace("next: [pages]", "").split("  - step: pages")[0])
    db = tmp_path / "noetl.db"
    env = {"NOETL_WORKER_RESULT_INLINE_BYTES": str(4 << 20)}
    proc = noetl("run", playbook, "--db", db, "--json", cwd=tmp_path, env=env, no_traceback=True)
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(db) as conn:
        kept = conn.execute("SELECT count(*) FROM result_store").fetchone()
        [(payload,)] = conn.execute(
            "SELECT payload FROM event_log WHERE type = 'tool.processed' AND step = 'start'"
        ).fetchall()
    assert kept == (0,)
    assert len(payload) > ROWS * 1000


LOOP_OVER_SPILLED = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: loop_over_spilled}
workflow:
  - step: make
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              return list(range(3000))
    result: {as: numbers}
    next: [fan]
  - step: fan
    loop: {in: "{{ numbers }}", iterator: n, mode: parallel, max_concurrency: 64}
    tool: {kind: noop, args: {n: "{{ n }}"}}
    result:
      collect: {into: seen, mode: list}
"""


def test_a_loop_runs_over_the_whole_of_a_spilled_collection(tmp_path: Path) -> None:
    """A list kept in the result store (over the inline limit) is a loop's collection
    whole, never its envelope's fields."""
    playbook = tmp_path / "loop.yaml"
    playbook.write_text(LOOP_OVER_SPILLED)
    db = tmp_path / "noetl.db"
    env = {"NOETL_WORKER_RESULT_INLINE_BYTES": "1024"}
    proc = noetl("run", playbook, "--db", db, "--json", cwd=tmp_path, env=env, no_traceback=True)
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(db) as conn:
        [(context,)] = conn.execute("SELECT context FROM execution").fetchall()
        [(started,)] = conn.execute(
            "SELECT payload FROM event_log WHERE type = 'loop.started'"
        ).fetchall()
    saved = json.loads(context)
    assert saved["numbers"]["_spilled"] is True
    assert len(json.loads(started)["items"]) == 3000
    assert [entry["n"] for entry in saved["seen"]] == list(range(3000))
