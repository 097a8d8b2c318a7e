"""SEMANTICS section 5: context, templates, helpers, `bind`, run-time template errors."""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import Harness

from noetl.core import EventType, ExecutionStatus
from noetl.decision.workloads import with_workload
from noetl.dsl.render import Renderer

E = EventType

HELPERS_PLAYBOOK = """
- step: start
  next: [a, b, c, lp, gated]
- step: a
  tool: {kind: noop}
- step: b
  tool: {kind: noop}
  result: {pick: "{{ this.v }}"}
  next: probe
- step: c
  tool: {kind: noop}
- step: lp
  loop: {collection: [1, 2, 3], mode: parallel}
  tool: {kind: noop}
- step: gated
  when: "{{ false }}"
- step: never
- step: probe
  tool:
    kind: noop
    args:
      done: "{{ [done('a'), done('b'), done('c'), done('lp'), done('gated'), done('never')] }}"
      ok: "{{ [ok('a'), ok('b'), ok('c'), ok('lp')] }}"
      fail: "{{ [fail('a'), fail('b'), fail('c'), fail('lp')] }}"
      running: "{{ [running('a'), running('b'), running('c'), running('lp'), running('never')] }}"
      loop_done: "{{ [loop_done('lp'), loop_done('b'), loop_done('a')] }}"
      all_done: "{{ [all_done(['b', 'c']), all_done(['a', 'b']), all_done([])] }}"
      any_done: "{{ [any_done(['a', 'b']), any_done(['a', 'lp']), any_done([])] }}"
      a: "{{ step.a.status }}"
      b: "{{ step.b.status }}"
      c: "{{ step.c.status }}"
      lp: "{{ step.lp.status }}"
      b_result: "{{ step.b.result }}"
      c_error: "{{ step.c.status.error }}"
      never: "{{ step.never.status }}"
"""


def _status(**values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "running": False,
        "done": False,
        "ok": None,
        "error": None,
        "total": None,
        "completed": 0,
        "succeeded": 0,
        "failed": 0,
    }
    return {**base, **values}


def test_helpers_and_the_step_namespace() -> None:
    h = Harness.of(HELPERS_PLAYBOOK, policy="on_step_fail: continue")
    h.fail("c", error="c broke")
    h.complete("lp", 0, this="x")
    h.fail("lp", 1, error="item broke")
    h.complete("b", this={"v": 42})  # b calls probe, whose args read the state
    args = h.task("probe").args
    assert args == {
        "done": [False, True, True, False, False, False],
        "ok": [False, True, False, False],
        "fail": [False, False, True, False],
        "running": [True, False, False, True, False],
        "loop_done": [False, True, False],
        "all_done": [True, False, True],
        "any_done": [True, False, False],
        "a": _status(running=True),
        "b": _status(done=True, ok=True),
        "c": _status(done=True, ok=False, error="c broke"),
        "lp": _status(running=True, total=3, completed=2, succeeded=1, failed=1),
        "b_result": 42,
        "c_error": "c broke",
        "never": _status(),
    }


def test_step_status_of_a_finished_loop_and_loop_done() -> None:
    h = Harness.of(
        """
        - step: start
          next: [lp, after]
        - step: lp
          loop: {collection: [1, 2], mode: parallel}
          tool: {kind: noop}
        - step: after
          when: "{{ loop_done('lp') }}"
          tool:
            kind: noop
            args: {s: "{{ step.lp.status }}", r: "{{ step.lp.result }}"}
        """
    )
    h.complete("lp", 1, this="two")
    assert h.step_status("after") == "parked"
    h.complete("lp", 0, this="one")
    assert h.task("after").args == {
        "s": _status(done=True, ok=True, total=2, completed=2, succeeded=2),
        "r": ["one", "two"],
    }


def test_names_in_scope_workload_execution_id_and_saved_values() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          result: {as: saved}
          next: use
        - step: use
          tool:
            kind: noop
            args:
              w: "{{ workload.n }}"
              eid: "{{ execution_id }}"
              saved: "{{ saved.k }}"
        """,
        workload={"n": 5},
    )
    h.complete("start", this={"k": "v"})
    assert h.task("use").args == {"w": 5, "eid": "e1", "saved": "v"}
    # The task carries no copy of the workload: the runtime that runs it adds it.
    assert h.task("use").context == {"execution_id": "e1", "step": "use"}
    assert with_workload(h.task("use"), h.state.workload).context == {
        "execution_id": "e1",
        "step": "use",
        "workload": {"n": 5},
    }


def test_workload_defaults_are_merged_under_the_request() -> None:
    h = Harness.from_text(
        """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: t}
workload: {a: 1, b: 2}
workflow:
  - step: start
    tool: {kind: noop, args: {a: "{{ workload.a }}", b: "{{ workload.b }}"}}
""",
        workload={"b": 20},
    )
    h.start()
    assert h.task("start").args == {"a": 1, "b": 20}


def test_native_types_and_mixed_text() -> None:
    h = Harness.of(
        """
        - step: start
          tool:
            kind: noop
            args:
              n: "{{ workload.n }}"
              users: "{{ workload.users }}"
              flag: "{{ workload.flag }}"
              nothing: "{{ none }}"
              obj: "{{ workload }}"
              mixed: "n={{ workload.n }}"
              two: "{{ workload.n }}{{ workload.n }}"
              spaced: "{{ workload.n }} {{ workload.n }}"
              dict_literal: "{{ {'a': {'b': workload.n}} }}"
              braces_in_text: "{{ '}}' }}"
              text_list: "n: {{ [workload.n] }}"
              plain: "no template"
              literal: 7
              nested:
                list: ["{{ workload.n }}", "x{{ workload.n }}", 1.5]
                map: {deep: "{{ workload.users[0] }}"}
        """,
        workload={"n": 3, "users": [{"id": 1}], "flag": False},
    )
    assert h.task("start").args == {
        "n": 3,
        "users": [{"id": 1}],
        "flag": False,
        "nothing": None,
        "obj": {"n": 3, "users": [{"id": 1}], "flag": False},
        "mixed": "n=3",
        "two": "33",
        "spaced": "3 3",
        "dict_literal": {"a": {"b": 3}},
        "braces_in_text": "}}",
        "text_list": "n: [3]",
        "plain": "no template",
        "literal": 7,
        "nested": {"list": [3, "x3", 1.5], "map": {"deep": {"id": 1}}},
    }


def test_bind_is_rendered_at_dispatch_and_visible_to_args_and_pick() -> None:
    h = Harness.of(
        """
        - step: start
          bind: {x: "{{ workload.n * 2 }}", label: "n is {{ workload.n }}"}
          tool: {kind: noop, args: {x: "{{ x }}", label: "{{ label }}"}}
          result: {pick: "{{ this.v + x }}", as: total}
          next: other
        - step: other
          tool: {kind: noop, args: {x: "{{ x }}"}}
        """,
        workload={"n": 3},
        policy="on_step_fail: continue",
        check_names=False,
    )
    started = h.of_type(E.STEP_STARTED, "start")[0]
    assert started.payload["bind"] == {"x": 6, "label": "n is 3"}
    task = h.task("start")
    assert task.args == {"x": 6, "label": "n is 3"}
    assert with_workload(task, h.state.workload).context == {
        "execution_id": "e1",
        "step": "start",
        "workload": {"n": 3},
        "x": 6,
        "label": "n is 3",
    }
    h.complete("start", this={"v": 10})
    assert h.state.context == {"total": 16}
    # bind names belong to their step only
    other = h.finished("other").payload
    assert other["status"] == "failed"
    assert other["error"] == "tool: args.x: undefined value: 'x' is undefined"


def test_bind_is_visible_to_the_collect_key() -> None:
    h = Harness.of(
        """
        - step: start
          bind: {prefix: "k"}
          tool: {kind: noop}
          result: {collect: {into: m, mode: map, key: "{{ prefix }}{{ out.id }}"}}
        """
    )
    h.complete("start", this={"id": 1})
    assert h.state.context == {"m": {"k1": {"id": 1}}}
    assert h.status is ExecutionStatus.OK


def test_bind_error_fails_the_step() -> None:
    h = Harness.of(
        """
        - step: start
          bind: {x: "{{ missing }}"}
          tool: {kind: noop}
        """,
        check_names=False,
    )
    assert h.dispatched == []
    assert h.finished("start").payload == {
        "status": "failed",
        "error": "bind: x: undefined value: 'missing' is undefined",
    }
    assert h.status is ExecutionStatus.FAIL


def test_loop_names_element_and_underscore_loop() -> None:
    h = Harness.of(
        """
        - step: start
          bind: {scale: 10}
          loop: {collection: "{{ workload.users }}", element: user, mode: parallel}
          tool:
            kind: noop
            args: {id: "{{ user.id * scale }}", loop: "{{ _loop }}"}
        """,
        workload={"users": [{"id": 1}, {"id": 2}]},
    )
    first, second = h.dispatched
    assert first.args == {"id": 10, "loop": {"index": 0, "item": {"id": 1}, "key": 0}}
    assert second.args == {"id": 20, "loop": {"index": 1, "item": {"id": 2}, "key": 1}}
    assert "workload" not in first.context
    assert with_workload(first, h.state.workload).context == {
        "execution_id": "e1",
        "step": "start",
        "workload": {"users": [{"id": 1}, {"id": 2}]},
        "scale": 10,
        "user": {"id": 1},
        "_loop": {"index": 0, "item": {"id": 1}, "key": 0},
    }


def test_loop_key_names_the_item_in_loop_and_the_task_key() -> None:
    h = Harness.of(
        """
        - step: start
          loop:
            collection: "{{ workload.users }}"
            element: user
            mode: parallel
            key: "u-{{ user.id }}"
          tool: {kind: noop, args: {key: "{{ _loop.key }}"}}
        """,
        workload={"users": [{"id": 7}, {"id": 9}]},
    )
    assert [t.args for t in h.dispatched] == [{"key": "u-7"}, {"key": "u-9"}]
    assert [t.key for t in h.dispatched] == ["e1:start:u-7", "e1:start:u-9"]
    assert [t.task_id for t in h.dispatched] == ["e1.start.0", "e1.start.1"]


def test_loop_key_error_fails_the_item() -> None:
    h = Harness.of(
        """
        - step: start
          loop: {collection: [1, 2], key: "{{ item.id }}"}
          tool: {kind: noop}
        """
    )
    assert h.dispatched == []
    finished = h.of_type(E.LOOP_ITERATION_FINISHED, "start")[0].payload
    assert finished["ok"] is False
    assert finished["error"].startswith("loop.key: ")
    assert h.status is ExecutionStatus.FAIL


def test_task_keys_without_a_loop_key() -> None:
    h = Harness.of(
        """
        - step: start
          next: lp
          tool: {kind: noop}
        - step: lp
          loop: {collection: [a, b], mode: parallel}
          tool: {kind: noop}
        """
    )
    assert h.task("start").key == "e1:start"
    h.complete("start")
    assert [t.key for t in h.pending] == ["e1:lp:0", "e1:lp:1"]


# --- run-time template errors ------------------------------------------------------------


@pytest.mark.parametrize(
    ("step_yaml", "error"),
    [
        (
            'tool: {kind: noop, args: {x: "{{ missing }}"}}',
            "tool: args.x: undefined value: 'missing' is undefined",
        ),
        (
            'tool: {kind: noop, args: {x: "a {{ workload.nope }} b"}}',
            "tool: args.x: undefined value: 'dict object' has no attribute 'nope'",
        ),
        (
            'tool: {kind: noop, args: {x: "{{ 1 / 0 }}"}}',
            "tool: args.x: ZeroDivisionError: division by zero",
        ),
        (
            "tool: {kind: noop, args: {x: \"{{ ''.__class__ }}\"}}",
            "tool: args.x: not allowed in templates: access to attribute '__class__' of 'str' "
            "object is unsafe.",
        ),
        (
            'tool: {kind: noop, args: {x: "{{ workload.vals.append(1) }}"}}',
            "tool: args.x: not allowed in templates: access to attribute 'append' of 'list' object "
            "is unsafe.",
        ),
        (
            'loop: {collection: "{{ workload.nope }}"}\n  tool: {kind: noop}',
            "loop.collection: undefined value: 'dict object' has no attribute 'nope'",
        ),
        (
            'loop: {collection: "{{ workload.n }}"}\n  tool: {kind: noop}',
            "loop.collection must be a list, got int",
        ),
        (
            'loop: {collection: "a, b"}\n  tool: {kind: noop}',
            "loop.collection must be a list, got str",
        ),
        (
            "tool: {kind: noop, args: {x: \"{{ 'x' * 2000000 }}\"}}",
            "tool: args.x: template builds a value over the limit of 1000000 characters",
        ),
        (
            "tool: {kind: noop, args: {x: "
            '"{% for i in range(100000) %}0123456789abc{% endfor %}"}}',
            "tool: args.x: template output is over the limit of 1000000 characters",
        ),
        (
            "tool: {kind: noop, args: {x: "
            "\"{% for i in range(100000) %}{{ 'x' * 10000 }}{% endfor %}\"}}",
            "tool: args.x: template output is over the limit of 1000000 characters",
        ),
        (
            'tool: {kind: noop, args: {x: "{{ range(1000000) | list }}"}}',
            "tool: args.x: range() of 1000000 items is over the limit of 100000",
        ),
        (
            'tool: {kind: noop, args: {x: "{{ 2 ** 100000 }}"}}',
            "tool: args.x: template builds an integer over the limit of 4300 digits",
        ),
    ],
)
def test_template_errors_at_dispatch_fail_the_step(step_yaml: str, error: str) -> None:
    h = Harness.of(
        f"- step: start\n  {step_yaml}", workload={"n": 3, "vals": [1]}, check_names=False
    )
    assert h.dispatched == []
    payload = h.finished("start").payload
    assert payload["status"] == "failed"
    assert payload["error"] == error
    assert h.status is ExecutionStatus.FAIL
    assert h.steps()["start"]["error"] == error


def test_bad_pick_fails_the_step_after_the_tool() -> None:
    h = Harness.of(
        """
        - step: start
          tool: {kind: noop}
          result: {pick: "{{ this.rows[0] }}", as: first}
        """
    )
    h.complete("start", this={"rows": []})
    payload = h.finished("start").payload
    assert payload["status"] == "failed"
    assert payload["error"].startswith("result.pick: ")
    assert h.state.context == {}
    assert h.status is ExecutionStatus.FAIL


def test_render_step_limit_fails_the_step_with_a_limit_message() -> None:
    h = Harness.of(
        """
        - step: start
          tool:
            kind: noop
            args:
              x: "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
        """,
        renderer=Renderer(max_steps=5000),
    )
    assert h.dispatched == []
    assert h.finished("start").payload == {
        "status": "failed",
        "error": "tool: args.x: template went over the limit of 5000 steps "
        "(operations, loop iterations and output count)",
    }
    assert h.status is ExecutionStatus.FAIL


def test_conditions_read_strings_as_booleans() -> None:
    h = Harness.of(
        """
        - step: start
          next:
            - {step: t1, when: "{{ 'yes' }}"}
            - {step: f1, when: "{{ 'false' }}"}
            - {step: f2, when: "{{ '0' }}"}
            - {step: f3, when: "{{ '' }}"}
            - {step: f4, when: "{{ 0 }}"}
            - {step: f5, when: "{{ [] }}"}
            - {step: f6, when: "{{ none }}"}
            - {step: f7, when: false}
            - {step: t2, when: true}
            - {step: t3, when: "{{ [0] }}"}
        - step: t1
        - step: t2
        - step: t3
        - step: f1
        - step: f2
        - step: f3
        - step: f4
        - step: f5
        - step: f6
        - step: f7
        """
    )
    assert h.of_type(E.NEXT_EVALUATED, "start")[0].payload["taken"] == ["t1", "t2", "t3"]


def test_native_values_become_data_that_events_can_carry() -> None:
    h = Harness.of(
        """
        - step: start
          loop: {collection: "{{ range(3) }}", mode: parallel}
          tool:
            kind: noop
            args:
              ids: "{{ workload.users | map(attribute='id') }}"
              pair: "{{ (item, 'x') }}"
              keyed: "{{ {1: 'one', none: 'null'} }}"
              pairs: "{{ workload.m | dictsort }}"
              steps: "{{ step.start.status.total }}"
        """,
        workload={"users": [{"id": 1}, {"id": 2}], "m": {"b": 2, "a": 1}},
    )
    assert [t.index for t in h.dispatched] == [0, 1, 2]
    assert h.dispatched[1].args == {
        "ids": [1, 2],
        "pair": [1, "x"],
        "keyed": {"1": "one", "null": "null"},
        "pairs": [["a", 1], ["b", 2]],
        "steps": 3,
    }
    assert h.of_type(E.LOOP_STARTED)[0].payload["items"] == [0, 1, 2]


@pytest.mark.parametrize(
    ("expr", "error"),
    [
        (
            "{{ workload.m.items }}",
            "tool: args.x: template value is a builtin_function_or_method, not data "
            "(a string, number, boolean, null, list or map)",
        ),
        (
            "{{ done }}",
            "tool: args.x: template value is a function, not data "
            "(a string, number, boolean, null, list or map)",
        ),
        ("{{ [1, missing] }}", "tool: args.x: undefined value: 'missing' is undefined"),
        ("{{ {'a': {'b': missing}} }}", "tool: args.x: undefined value: 'missing' is undefined"),
        ("text {{ [1, missing] }}", "tool: args.x: undefined value: 'missing' is undefined"),
        (
            "text {{ {'k': {'j': missing}} }}",
            "tool: args.x: undefined value: 'missing' is undefined",
        ),
    ],
)
def test_a_native_value_that_is_not_data_fails_the_step(expr: str, error: str) -> None:
    h = Harness.of(
        f"""
        - step: start
          tool: {{kind: noop, args: {{x: "{expr}"}}}}
        """,
        workload={"m": {"a": 1}},
        check_names=False,
    )
    assert h.dispatched == []
    assert h.finished("start").payload == {"status": "failed", "error": error}
    assert h.status is ExecutionStatus.FAIL
