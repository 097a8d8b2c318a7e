"""The live view of `noetl run` in a pseudo-terminal of 80 and 120 columns: redrawn in
place, each line within the width, a loop's rate and time left while it runs, its failed
items counted, and the last frame kept on the screen."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: a_playbook_with_a_rather_long_name_to_cut}
workflow:
  - step: a_step_whose_name_is_much_too_long_for_a_narrow_terminal_window
    loop: {collection: "{{ range(60) | list }}", element: n}
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            time.sleep(0.05)
            if args["n"] % 20 == 7:
                raise ValueError("seven")
            return args["n"]
      args: {n: "{{ n }}"}
      retry: {max_attempts: 1}
"""
# What ends a line on the screen: a new line, a carriage return, a cursor move or an erase.
BREAKS = re.compile(r"\r\n|\r|\n|\x1b\[[0-9]*[ABCDKJ]")
STYLES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def run_in_terminal(tmp_path: Path, columns: int, playbook: str = PLAYBOOK, *flags: str) -> str:
    path = tmp_path / "loop.yaml"
    path.write_text(playbook, encoding="utf-8")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(ROOT)}
    env.pop("COLUMNS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "noetl", "run", str(path), "--db", str(tmp_path / "n.db"), *flags],
        stdin=slave, stdout=slave, stderr=slave, env=env, cwd=tmp_path, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # the terminal closed: every writer exited
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("columns", [80, 120])
def test_the_live_view_fits_the_terminal_and_shows_rate_and_failures(
    tmp_path: Path, columns: int
) -> None:
    raw = run_in_terminal(tmp_path, columns)
    assert "\x1b[" in raw  # drawn with cursor moves: redrawn in place
    lines = [STYLES.sub("", line) for line in BREAKS.split(raw)]
    text = "\n".join(lines)
    frame = [line for line in lines if "█" in line or "░" in line]
    assert frame, text
    assert all(len(line) <= columns for line in frame), [len(line) for line in frame]
    assert any(re.search(r"\d+(\.\d)?/s ETA \d+:\d\d", line) for line in frame), frame
    assert any(" failed" in line for line in frame)
    # the last frame stays: the loop's final count, then the summary
    assert any("60/60" in line and "3 failed" in line for line in frame), frame[-3:]
    assert "finished: fail" in text


PRINTS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: prints}
workflow:
  - step: items
    loop: {collection: "{{ range(12) | list }}", element: n}
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            time.sleep(0.15)
            print(f"item {args['n']} printed this")
            if args["n"] == 5:
                raise ValueError("five")
            return args["n"]
      args: {n: "{{ n }}"}
      retry: {max_attempts: 1}
"""


@pytest.mark.parametrize("columns", [80, 120])
def test_output_and_log_lines_print_above_the_live_region(tmp_path: Path, columns: int) -> None:
    raw = run_in_terminal(tmp_path, columns, PRINTS, "--log-level", "WARNING")
    lines = [STYLES.sub("", line).rstrip() for line in BREAKS.split(raw)]
    # Each printed line is a whole line of its own, never drawn into the frame.
    for n in range(12):
        assert f"[items#{n}] item {n} printed this" in lines, "\n".join(lines)
    warnings = [line for line in lines if "WARNING" in line and "task_dlq" in line]
    assert warnings, "\n".join(lines)
    assert all(line.index("WARNING") < 20 for line in warnings)  # starts its own line
    frame = [line for line in lines if "█" in line or "░" in line]
    assert all(len(line) <= columns for line in frame)
    assert any("12/12" in line and "1 failed" in line for line in frame), frame[-3:]
