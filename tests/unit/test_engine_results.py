"""SEMANTICS section 7: the result pipeline (this -> pick -> out -> as / collect) on steps."""

from __future__ import annotations

from engine_harness import Harness

from noetl.core import EventType, ExecutionStatus

E = EventType


def _one(result: str, this: object) -> Harness:
    h = Harness.of(
        f"""
        - step: start
          tool: {{kind: noop}}
          result: {result}
          next: probe
        - step: probe
          tool: {{kind: noop, args: {{r: "{{{{ step.start.result }}}}"}}}}
        """,
        policy="on_step_fail: continue",
    )
    h.complete("start", this=this)
    return h


def test_without_pick_out_is_this() -> None:
    h = _one("{as: saved}", {"a": 1})
    assert h.finished("start").payload == {
        "status": "ok",
        "result": {"a": 1},
        "saved_as": "saved",
    }
    assert h.state.context == {"saved": {"a": 1}}
    assert h.task("probe").args == {"r": {"a": 1}}


def test_pick_gives_out_and_as_stores_it() -> None:
    h = _one("{pick: '{{ this.rows | length }}', as: n}", {"rows": [1, 2, 3]})
    assert h.state.context == {"n": 3}
    assert h.state.steps["start"].result == 3
    assert h.task("probe").args == {"r": 3}


def test_pick_can_be_a_map_of_templates() -> None:
    h = _one(
        "{pick: {first: '{{ this.rows[0] }}', fixed: 1, label: 'n={{ this.n }}'}, as: p}",
        {"rows": [7], "n": 2},
    )
    assert h.state.context == {"p": {"first": 7, "fixed": 1, "label": "n=2"}}


def test_collect_list_on_a_single_step() -> None:
    h = _one("{pick: '{{ this.v }}', collect: {into: vs, mode: list}}", {"v": 5})
    assert h.finished("start").payload == {"status": "ok", "result": 5, "context": {"vs": [5]}}
    assert h.state.context == {"vs": [5]}


def test_collect_map_key_sees_out_and_this() -> None:
    h = _one(
        "{pick: '{{ this.value }}', collect: {into: m, mode: map, key: '{{ this.id }}:{{ out }}'}}",
        {"id": "k", "value": 9},
    )
    assert h.state.context == {"m": {"k:9": 9}}


def test_collect_map_key_error_fails_the_step() -> None:
    h = _one("{collect: {into: m, mode: map, key: '{{ this.nope }}'}}", {"id": 1})
    payload = h.finished("start").payload
    assert payload["status"] == "failed"
    assert payload["error"] == (
        "result.collect.key: undefined value: 'dict object' has no attribute 'nope'"
    )
    assert h.state.context == {}


def test_as_and_collect_together() -> None:
    h = _one("{as: last, collect: {into: all, mode: list}}", "x")
    assert h.state.context == {"last": "x", "all": ["x"]}


def test_collect_appends_across_steps_in_finish_order() -> None:
    h = Harness.of(
        """
        - step: start
          next: [a, b, c]
        - step: a
          tool: {kind: noop}
          result: {collect: {into: seen, mode: list}}
        - step: b
          tool: {kind: noop}
          result: {collect: {into: seen, mode: list}}
        - step: c
          tool: {kind: noop}
          result: {collect: {into: byname, mode: map, key: "{{ out }}"}}
          next: d
        - step: d
          tool: {kind: noop}
          result: {collect: {into: byname, mode: map, key: "{{ out }}"}}
        """
    )
    h.complete("b", this="B")
    h.complete("a", this="A")
    h.complete("c", this="C")
    h.complete("d", this="D")
    assert h.state.context == {"seen": ["B", "A"], "byname": {"C": "C", "D": "D"}}
    assert h.finished("a").payload["context"] == {"seen": ["B", "A"]}
    assert h.status is ExecutionStatus.OK


def test_a_null_output_is_saved_as_null() -> None:
    h = _one("{as: saved, collect: {into: all, mode: list}}", None)
    assert h.state.context == {"saved": None, "all": [None]}


def test_failed_step_saves_nothing_and_has_no_result() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          result: {as: saved, collect: {into: all, mode: list}}
        """,
        policy="on_step_fail: continue",
    )
    h.fail("start", error="x")
    assert h.finished("start").payload == {"status": "failed", "error": "x"}
    assert h.state.context == {}
    assert h.state.steps["start"].result is None


def test_result_inside_tool_is_the_same_as_on_the_step() -> None:
    h = Harness.of(
        """
        - step: start
          tool:
            kind: noop
            result: {pick: "{{ this.v }}", as: v}
        """
    )
    h.complete("start", this={"v": 1})
    assert h.state.context == {"v": 1}


def test_a_later_step_reads_saved_values_through_args() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          result: {pick: "{{ this.rows }}", as: rows}
          next: use
        - step: use
          tool: {kind: noop, args: {count: "{{ rows | length }}", first: "{{ rows[0] }}"}}
        """
    )
    h.complete("start", this={"rows": ["r1", "r2"]})
    assert h.task("use").args == {"count": 2, "first": "r1"}
    # saved values reach tools through args only: the task context stays small
    assert h.task("use").context == {"execution_id": "e1", "step": "use"}
