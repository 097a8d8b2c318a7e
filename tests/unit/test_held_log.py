"""The log of a `noetl run` held until it ends (noetl.cli.held_log)."""

from __future__ import annotations

import io

import pytest

from noetl.cli import held_log
from noetl.cli.held_log import HeldLog


def test_held_lines_are_released_in_order_or_discarded() -> None:
    held = HeldLog()
    held.write("one\n")
    held.write("two\n")
    assert held.count == 2
    out = io.StringIO()
    held.release(out)
    assert out.getvalue() == "one\ntwo\n" and held.released
    other = HeldLog()
    other.write("x\n")
    assert other.discard() == 1 and other.count == 0


def test_what_is_held_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held_log, "MAX_HELD_CHARS", 10)
    held = HeldLog()
    for n in range(5):
        held.write(f"line{n}\n")  # 6 characters each
    out = io.StringIO()
    held.release(out)
    assert out.getvalue() == "(4 earlier log lines were dropped)\nline4\n"
