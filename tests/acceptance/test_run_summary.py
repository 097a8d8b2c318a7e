"""What `noetl run` prints when a run ends: the summary answers (saved values, failed
steps with their line, a failed loop's items with their dead-letter ids, retries) and a
failure the playbook handled prints no raw log lines. The real CLI in a subprocess."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.cli import noetl

LOOP_FAILS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: loop_fails}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        def main(context, args):
            return {"password": "hunter2", "token": args["t"], "text": "x" * 500}
      args: {t: "{{ secrets.CANARY }}"}
    result: {as: first}
    next: items
  - step: items
    loop: {collection: [{d: 1}, {d: 0}, {d: 2}, {d: 0}], element: row}
    tool:
      kind: python
      code: |
        def main(context, args):
            return 10 / args["d"]
      args: {d: "{{ row.d }}"}
    result: {as: q}
"""

HANDLED = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: handled}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import os
        def main(context, args):
            path = args["marker"]
            if not os.path.exists(path):
                open(path, "w").close()
                raise ConnectionError("flaky")
            raise ValueError("nope")
      args: {marker: "{{ workload.marker }}"}
      retry: {max_attempts: 2, initial_delay: 0.01, jitter: false}
    next:
      - step: recover
        when: "{{ fail('start') }}"
      - step: recover
  - step: recover
    tool: {kind: python, code: "def main(context, args):\\n    return 'fine'\\n"}
    result: {as: outcome}
"""


def run(tmp_path: Path, text: str, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "playbook.yaml"
    path.write_text(text, encoding="utf-8")
    proc = noetl(
        "run", path, "--db", tmp_path / "noetl.db", *args,
        env={"NOETL_SECRET_CANARY": "canary-3141"}, clean_env=True,
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def test_a_failed_loop_lists_its_items_with_their_dead_letter_ids(tmp_path: Path) -> None:
    code, out, err = run(tmp_path, LOOP_FAILS)
    assert code == 1
    assert re.search(r"finished: fail\s+in [0-9.]+s \(1 failed, 1 ok\)", out), out
    assert "  items (line 14): 2 of 4 loop items failed" in out
    items = re.findall(
        r"item (\d) \((.*?)\): ZeroDivisionError: division by zero  \[dlq (\S+)\]", out
    )
    assert [(i, element) for i, element, _ in items] == [("1", '{"d":0}'), ("3", '{"d":0}')]
    assert all(dlq.endswith(f".items.{i}") for i, _, dlq in items)
    # each saved value on one line, cut, with secrets masked
    [first] = [line for line in out.splitlines() if line.startswith("  first = ")]
    assert '"password":"***"' in first and '"token":"***"' in first
    assert "hunter2" not in out + err and "canary-3141" not in out + err
    assert first.endswith("...") and len(first) < 120
    # the run failed: its log lines are printed, before the summary
    assert " task_dlq " in err


def test_a_handled_failure_prints_no_raw_log_lines(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    code, out, err = run(tmp_path, HANDLED, "--set", f"marker={marker}")
    assert code == 0, out + err
    assert "WARNING noetl" not in err
    assert re.search(r"\(\d+ log lines of failures the playbook handled are hidden", err), err
    assert "  start (line 5): ValueError: nope" in out
    assert "  start: 1 retries (2 attempts)" in out
    assert '  outcome = "fine"' in out
    # --log-level brings them back, as they happen
    marker.unlink()
    code, out, err = run(tmp_path, HANDLED, "--set", f"marker={marker}", "--log-level", "WARNING")
    assert code == 0
    assert " task_dlq " in err and "are hidden" not in err
