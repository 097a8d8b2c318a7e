"""The timeline of an execution, folded from real engine logs (the harness drives the
engine with a clock that ticks one second per input)."""

from __future__ import annotations

from engine_harness import Harness

from noetl.runtime.timeline import execution_timeline

FLOW = """
- step: first
  tool: {kind: python, code: pass}
  next: [items]
- step: items
  loop:
    collection: [10, 20, 30, 40, 50]
    mode: parallel
  tool:
    kind: noop
    args: {n: "{{ item }}"}
    retry: {max_attempts: 2, initial_delay: 0.25, jitter: false}
  next: [last]
- step: last
"""


def rows(h: Harness, limit: int = 20) -> dict[str, dict]:
    found = execution_timeline(h.events, h.state.steps, limit=limit)
    return {row.step: row.to_dict() for row in found}


def test_each_step_spans_from_its_first_start_to_its_end() -> None:
    h = Harness.of(FLOW)
    h.complete("first")
    timeline = rows(h)
    assert list(timeline) == ["first", "items", "last"]  # the workflow's order
    first = timeline["first"]
    assert first["status"] == "ok" and first["started_at"] is not None
    assert first["finished_at"] is not None and first["finished_at"] > first["started_at"]
    (span,) = first["spans"]
    assert (span["index"], span["attempt"], span["status"]) == (None, 1, "ok")
    items = timeline["items"]
    assert items["status"] == "running" and items["finished_at"] is None
    assert items["started_at"] >= first["finished_at"]
    assert [s["index"] for s in items["spans"]] == [0, 1, 2, 3, 4]
    assert {s["status"] for s in items["spans"]} == {"running"}
    never = timeline["last"]
    assert (never["started_at"], never["spans"], never["runs"]) == (None, [], 0)


def test_a_retry_is_a_span_of_its_own_and_a_failure_shows() -> None:
    h = Harness.of(FLOW)
    h.complete("first")
    for index in (0, 2, 3, 4):
        h.complete("items", index)
    h.fail("items", 1, error="ValueError: bad 20")
    h.fail("items", 1, error="ValueError: still bad")
    items = rows(h)["items"]
    assert items["status"] == "failed" and items["finished_at"] is not None
    item1 = [s for s in items["spans"] if s["index"] == 1]
    assert [(s["attempt"], s["status"]) for s in item1] == [(1, "failed"), (2, "failed")]
    assert item1[1]["delay_ms"] == 250 and item1[1]["error"] == "ValueError: still bad"
    assert item1[0]["finished_at"] <= item1[1]["started_at"]
    assert (items["tasks"], items["attempts"], items["hidden"]) == (5, 6, None)


def test_a_large_loop_lists_the_notable_tasks_first_and_sums_up_the_rest() -> None:
    h = Harness.of(FLOW)
    h.complete("first")
    h.complete("items", 0)
    h.complete("items", 1)
    h.fail("items", 3, error="broke")  # retried: its second attempt runs
    h.complete("items", 4)
    items = rows(h, limit=2)["items"]
    # Item 3 (retried) and item 2 (running) are listed; the three that went well are not.
    assert [(s["index"], s["attempt"]) for s in items["spans"]] == [(2, 1), (3, 1), (3, 2)]
    hidden = items["hidden"]
    assert (hidden["tasks"], hidden["attempts"], hidden["statuses"]) == (3, 3, {"ok": 3})
    assert hidden["started_at"] <= hidden["finished_at"]
    assert (items["tasks"], items["attempts"]) == (5, 6)
    everything = rows(h, limit=5)["items"]
    assert everything["hidden"] is None and len(everything["spans"]) == 6


def test_canceled_attempts_end_when_the_execution_is_canceled() -> None:
    h = Harness.of(FLOW)
    h.complete("first")
    h.complete("items", 0)
    h.cancel()
    items = rows(h)["items"]
    statuses = [s["status"] for s in items["spans"]]
    assert statuses == ["ok", "canceled", "canceled", "canceled", "canceled"]
    assert all(s["finished_at"] is not None for s in items["spans"])
