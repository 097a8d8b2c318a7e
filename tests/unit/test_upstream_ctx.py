"""Upstream NoETL's execution variables (`ctx`) and a loop iteration's `iter`.

`ctx` is event-sourced: every change is a patch inside the event that makes it, and the
harness checks after every decision that folding the events gives the engine's state.
The playbooks are small and made up for the test, written in upstream's dialect.
"""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from noetl.core import EventType, Outcome, Task
from noetl.dsl import load_playbook_text
from noetl.engine import ExecutionState, fold
from noetl.engine.variables import MAX_CTX_BYTES, apply_assignments, normalize_patch, parse_key
from noetl.errors import TemplateError
from tests.unit.engine_harness import Harness

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: vars
"""


def upstream(body: str, **handlers: Any) -> Harness:
    text = HEAD + textwrap.dedent(body)
    harness = Harness.from_text(text, handlers=handlers)
    assert harness.engine.playbook.upstream
    harness.start()
    return harness


def args_of(task: Task) -> dict[str, Any]:
    return dict(task.args)


def echo(task: Task) -> Any:
    return task.args


def events_with_ctx(h: Harness) -> list[tuple[str, str | None, dict[str, Any]]]:
    return [(e.type, e.step, e.payload["ctx"]) for e in h.events if "ctx" in e.payload]


# --- keys ----------------------------------------------------------------------------------


def test_keys_name_a_scope_a_variable_and_a_member_path() -> None:
    assert parse_key("ctx.page") == parse_key("page")
    assert parse_key("ctx.page.size").path == ("size",)
    assert parse_key("iter.row").scope == "iter"
    for bad in ("ctx", "ctx.", "ctx.a-b", "1x", "", "a..b"):
        with pytest.raises(ValueError):
            parse_key(bad)


def test_assignments_copy_and_nest_never_mutating() -> None:
    ctx = {"page": {"size": 10, "n": 1}}
    patch = apply_assignments(
        ctx, [(parse_key("ctx.page.n"), 2), (parse_key("total"), 5), (parse_key("page.m"), 3)]
    )
    assert patch == {"page": {"size": 10, "n": 2, "m": 3}, "total": 5}
    assert ctx == {"page": {"size": 10, "n": 1}}


def test_a_task_patch_is_read_as_top_level_names_and_bounded() -> None:
    assert normalize_patch({"a": {"x": 1}}, {"ctx.a.y": 2, "b": 3}) == {
        "a": {"x": 1, "y": 2},
        "b": 3,
    }
    with pytest.raises(TemplateError, match="only ctx"):
        normalize_patch({}, {"iter.a": 1})
    with pytest.raises(TemplateError, match="over the limit"):
        normalize_patch({"big": "x" * (MAX_CTX_BYTES - 10)}, {"more": "y" * 100})
    with pytest.raises(TemplateError, match="NUL"):
        normalize_patch({}, {"a": "bad\x00"})


# --- step and arc set ----------------------------------------------------------------------


CHAIN = """\
workload: {base: 10}
workflow:
  - step: start
    tool: {kind: python, input: {b: "{{ base }}"}, code: "result = {'n': b}"}
    set:
      ctx.first: "{{ result.n }}"
      ctx.same: "{{ start.n == this.n }}"
    next:
      spec: {mode: exclusive}
      arcs:
        - step: never
          when: "{{ start.n > 100 }}"
          set: {ctx.never: 1}
        - step: second
          set:
            ctx.pair: "{{ [start.n, ctx.first] }}"
            ctx.page.size: 5
  - step: never
    tool: {kind: python, code: "result = 0"}
  - step: second
    tool:
      kind: python
      input:
        pair: "{{ ctx.pair }}"
        missing: "{{ ctx.missing | default('fallback') }}"
        size: "{{ ctx.page.size }}"
      code: "result = pair"
"""


def test_step_set_then_arc_set_are_patches_applied_before_the_target_runs() -> None:
    h = upstream(CHAIN, start=lambda t: {"n": t.args["b"]}, second=echo)
    h.run()
    assert h.status.value == "ok"
    assert h.state.ctx == {"first": 10, "same": True, "pair": [10, 10], "page": {"size": 5}}
    assert events_with_ctx(h) == [
        ("step.finished", "start", {"first": 10, "same": True}),
        ("next.evaluated", "start", {"pair": [10, 10], "page": {"size": 5}}),
    ]
    second = h.finished("second").payload["result"]
    assert second == {"pair": [10, 10], "missing": "fallback", "size": 5}
    # Only the arc that fired set anything.
    assert "never" not in h.state.ctx


def test_the_fold_of_the_log_gives_the_same_ctx() -> None:
    h = upstream(CHAIN, start=lambda t: {"n": t.args["b"]}, second=echo)
    h.run()
    again = fold(ExecutionState.new("e1", h.engine.order), h.events)
    assert again.ctx == h.state.ctx


def test_templates_see_an_empty_ctx_before_anything_is_set() -> None:
    h = upstream(
        """\
        workflow:
          - step: start
            tool: {kind: python, input: {all: "{{ ctx }}", it: "{{ iter }}"}, code: "result = 1"}
        """,
        start=echo,
    )
    task = h.task("start")
    assert task.args == {"all": {}, "it": {}}
    # Rendered here: the task need not carry the variables to the worker.
    assert "ctx" not in task.context and "iter" not in task.context


def test_a_task_that_reads_ctx_on_the_worker_carries_it() -> None:
    h = upstream(
        """\
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
            set: {ctx.token: abc}
            next: [code, sink, neither]
          - step: code
            tool: {kind: python, code: "result = context.get('ctx')"}
          - step: sink
            tool: {kind: python, code: "result = 1"}
            result:
              sink:
                - file: {path: out.json, format: json, args: {token: "{{ ctx.token }}"}}
          - step: neither
            tool: {kind: python, input: {t: "{{ ctx.token }}"}, code: "result = t"}
        """,
        start=lambda t: 1,
    )
    h.answer_step("start")
    assert h.task("code").context["ctx"] == {"token": "abc"}
    assert h.task("sink").context["ctx"] == {"token": "abc"}
    assert "ctx" not in h.task("neither").context
    assert h.task("neither").args == {"t": "abc"}


def test_a_step_set_that_fails_to_render_fails_the_step_with_its_key() -> None:
    h = upstream(
        """\
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
            set: {ctx.x: "{{ result.nothing.here }}"}
        """,
        start=lambda t: {"a": 1},
    )
    h.run()
    finished = h.finished("start").payload
    assert finished["status"] == "failed"
    assert finished["error"].startswith("set: ctx.x: ")
    assert "ctx" not in finished
    assert h.status.value == "fail"


def test_a_value_too_big_for_ctx_fails_the_step_not_the_engine() -> None:
    h = upstream(
        """\
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
            set: {ctx.small: "{{ result[0] }}"}
            next: [second]
          - step: second
            tool: {kind: python, code: "result = 1"}
            set: {ctx.more: "{{ result }}"}
        """,
        start=lambda t: ["x" * 1000] * 10,
        second=lambda t: ["y" * 1000] * 2000,
    )
    h.run()
    assert h.step_status("start") == "ok"
    error = h.finished("second").payload["error"]
    assert error.startswith("set: ctx.more: ")
    assert "over the limit" in error
    assert list(h.state.ctx) == ["small"]
    assert h.status.value == "fail"


def test_ctx_as_a_whole_is_bounded_across_steps() -> None:
    chunk = ["z" * 1000] * 900  # under one template's limit, about 0.9 MB of JSON
    lines = ["workflow:"]
    for i in range(6):
        lines += [f"  - step: s{i}", '    tool: {kind: python, code: "result = 1"}']
        if i < 5:
            lines += [f'    set: {{ctx.part{i}: "{{{{ result }}}}"}}', f"    next: [s{i + 1}]"]
    body = "\n".join(lines) + "\n"
    h = upstream(body, **{f"s{i}": (lambda t: chunk) for i in range(6)})
    h.run()
    failed = [name for name in h.engine.order if h.step_status(name) == "failed"]
    assert failed == ["s4"]
    assert "over the limit" in h.finished("s4").payload["error"]
    assert sorted(h.state.ctx) == ["part0", "part1", "part2", "part3"]


def test_an_arc_set_that_fails_fails_the_execution_naming_the_arc() -> None:
    h = upstream(
        """\
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
            next:
              arcs:
                - step: second
                  set: {ctx.x: "{{ start.nope }}"}
          - step: second
            tool: {kind: python, code: "result = 1"}
        """,
        start=lambda t: {"a": 1},
    )
    h.run()
    assert h.status.value == "fail"
    assert h.state.error is not None
    assert h.state.error.startswith("step 'start', arc to 'second': set: ctx.x: ")
    evaluated = h.of_type(EventType.NEXT_EVALUATED, "start")[0].payload
    assert evaluated["taken"] == []
    assert evaluated["edges"][0]["error"].startswith("set: ")
    assert h.step_status("second") == "skipped"


def test_a_failed_step_routes_with_set_on_its_error_arc() -> None:
    h = upstream(
        """\
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
            next:
              spec: {mode: exclusive}
              arcs:
                - step: recover
                  when: "{{ result.status == 'error' }}"
                  set: {ctx.why: "{{ result.error }}"}
          - step: recover
            tool: {kind: python, input: {why: "{{ ctx.why }}"}, code: "result = why"}
        """,
        recover=echo,
    )
    h.fail("start", error="no luck")
    h.run()
    assert h.state.ctx == {"why": "no luck"}
    assert h.finished("recover").payload["result"] == {"why": "no luck"}


# --- loops and iter ------------------------------------------------------------------------


LOOP = """\
workflow:
  - step: start
    tool: {kind: python, code: "result = [1, 2, 3]"}
    set: {ctx.items: "{{ result }}"}
    next: [each]
  - step: each
    loop: {in: "{{ ctx.items }}", iterator: num, spec: {mode: parallel}}
    tool: {kind: python, input: {n: "{{ iter.num }}", i: "{{ iter._index }}"}, code: "result = n"}
"""


def test_a_loop_reads_its_items_from_ctx_and_each_item_as_iter() -> None:
    h = upstream(LOOP, start=lambda t: [1, 2, 3], each=echo)
    h.answer_step("start")
    tasks = [h.task("each", i) for i in range(3)]
    assert [t.args for t in tasks] == [{"n": 1, "i": 0}, {"n": 2, "i": 1}, {"n": 3, "i": 2}]
    assert "iter" not in tasks[1].context  # rendered here


def test_a_loop_item_whose_code_reads_iter_carries_it() -> None:
    h = upstream(
        LOOP.replace('code: "result = n"', "code: \"result = context['iter']['num']\""),
        start=lambda t: [1, 2, 3],
    )
    h.answer_step("start")
    assert h.task("each", 1).context["iter"] == {"num": 2, "_index": 1}
    assert h.task("each", 1).context["ctx"] == {"items": [1, 2, 3]}


def test_parallel_items_writing_one_key_last_write_wins_in_event_order() -> None:
    h = upstream(LOOP, start=lambda t: [1, 2, 3], each=echo)
    h.answer_step("start")
    order = [2, 0, 1]
    for index in order:
        task = h.task("each", index)
        h.outcome(task.task_id, ok=True, this=index, ctx={"last": index, f"seen_{index}": True})
    assert h.state.ctx["last"] == order[-1]
    assert {k for k in h.state.ctx if k.startswith("seen_")} == {"seen_0", "seen_1", "seen_2"}
    processed = [e for e in h.of_type(EventType.TOOL_PROCESSED, "each") if "ctx" in e.payload]
    assert [e.payload["ctx"]["last"] for e in processed] == order


# --- a task's patch (Outcome.ctx) ----------------------------------------------------------


TWO = """\
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
    next: [second]
  - step: second
    tool: {kind: python, input: {seen: "{{ ctx.flag | default('unset') }}"}, code: "result = 1"}
"""


def test_a_task_patch_is_applied_once_with_its_outcome() -> None:
    h = upstream(TWO, second=echo)
    payload = Outcome("e1.start", ok=True, this=1, ctx={"ctx.flag": "on"}).to_payload()
    h.outcome(**payload)
    h.run()
    assert h.state.ctx == {"flag": "on"}
    assert h.finished("second").payload["result"] == {"seen": "on"}
    [recorded] = [e for e in h.events if "ctx" in e.payload]
    assert recorded.type == EventType.TOOL_PROCESSED
    assert recorded.payload["ctx"] == {"flag": "on"}
    # A late duplicate of the same outcome is discarded, its patch with it.
    h.outcome("e1.start", ok=True, this=1, ctx={"flag": "again"})
    assert h.state.ctx == {"flag": "on"}


def test_each_attempt_of_a_retried_task_records_its_own_patch() -> None:
    h = upstream(
        """\
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1", retry: {max_attempts: 2}}
        """,
    )
    task = h.task("start")
    h.outcome(task.task_id, ok=False, error="flaky", retryable=True, ctx={"tries": 1})
    assert h.state.ctx == {"tries": 1}
    h.outcome(task.task_id, ok=True, this=1, ctx={"tries": 2})
    assert h.state.ctx == {"tries": 2}
    assert h.status.value == "ok"


def test_a_task_patch_too_big_fails_the_task_with_the_reason() -> None:
    h = upstream(TWO.replace('code: "result = 1"}', 'code: "result = 1", retry: 3}', 1))
    h.outcome("e1.start", ok=True, this=1, ctx={"huge": "x" * (MAX_CTX_BYTES + 1)})
    assert h.of_type(EventType.RETRY_STARTED) == []  # the same patch would be refused again
    assert h.state.ctx == {}
    finished = h.finished("start").payload
    assert finished["status"] == "failed"
    assert "the task's ctx variables were refused" in finished["error"]
    assert h.status.value == "fail"


# --- native playbooks ------------------------------------------------------------------------


def test_a_native_playbook_has_no_ctx_and_drops_a_task_patch() -> None:
    text = HEAD + textwrap.dedent("""\
        workflow:
          - step: start
            tool: {kind: noop}
            next: [second]
          - step: second
            tool: {kind: noop, args: {c: "{{ ctx | default('none') }}"}}
        """)
    h = Harness.from_text(text)
    assert not h.engine.playbook.upstream
    h.start()
    assert "ctx" not in h.task("start").context
    h.outcome("e1.start", ok=True, this=1, ctx={"a": 1})
    assert h.state.ctx == {}
    assert h.task("second").args == {"c": "none"}
    assert all("ctx" not in e.payload for e in h.events)


def test_set_in_a_native_next_is_the_unknown_key_it_always_was() -> None:
    text = HEAD + textwrap.dedent("""\
        workflow:
          - step: start
            tool: noop
            next:
              - step: second
                set: {x: 1}
          - step: second
            tool: noop
        """)
    result = load_playbook_text(text, "native.yaml")
    assert [d.format() for d in result.diagnostics] == [
        "native.yaml:10: error E100: step 'start': unknown next edge key 'set' "
        "[workflow[0].next[0].set]"
    ]


def test_iter_keys_cannot_be_set_by_a_step_or_an_arc() -> None:
    text = HEAD + textwrap.dedent("""\
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
            set: {iter.page: 1}
        """)
    result = load_playbook_text(text, "iter.yaml")
    [error] = result.errors
    assert "iter variables belong to one loop iteration" in error.message


# --- step results by name: upstream's `.data` / `.result` envelope -------------------------


def test_a_step_result_answers_data_and_result_as_itself_unless_it_has_such_a_key() -> None:
    h = upstream(
        """\
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
            next: [{step: plain}]
          - step: plain
            tool: {kind: python, code: "result = 1"}
            next: [{step: check}]
          - step: check
            tool:
              kind: python
              input:
                whole: "{{ start.data }}"
                status: "{{ start.result.status }}"
                own: "{{ plain.data }}"
                count: "{{ start.data.n }}"
              code: "result = 1"
        """,
        start=lambda t: {"status": "success", "n": 3},
        plain=lambda t: {"data": {"x": 1}},
        check=echo,
    )
    h.run()
    assert h.status.value == "ok"
    assert h.finished("check").payload["result"] == {
        "whole": {"status": "success", "n": 3},
        "status": "success",
        "own": {"x": 1},
        "count": 3,
    }


def test_step_set_and_arc_when_read_the_outcome_as_output() -> None:
    h = upstream(
        """\
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
            set: {ctx.count: "{{ output.data.rows | length }}", ctx.how: "{{ output.status }}"}
            next:
              arcs:
                - step: many
                  when: "{{ output.status == 'ok' and output.data.rows | length > 1 }}"
                - step: few
                  when: "{{ output.data.rows | length <= 1 }}"
          - step: many
            tool: {kind: python, code: "result = 1"}
          - step: few
            tool: {kind: python, code: "result = 1"}
        """,
        start=lambda t: {"rows": [1, 2, 3]},
        many=echo,
        few=echo,
    )
    h.run()
    assert h.status.value == "ok"
    assert h.state.ctx == {"count": 3, "how": "ok"}
    assert [e.step for e in h.events if e.type == EventType.STEP_FINISHED.value] == [
        "start",
        "many",
    ]


LOOP_SHAPES = """\
workflow:
  - step: start
    loop:
      in: "{{ [3, 4, 5] }}"
      iterator: n
    tool:
      kind: python
      input: {n: "{{ n }}", at: "{{ loop_index }}", same: "{{ iter.n == n }}"}
      code: "result = {'n': n}"
    next:
      spec: {mode: exclusive}
      arcs:
        - step: report
  - step: report
    tool:
      kind: python
      input:
        total: "{{ start.stats.total }}"
        failed: "{{ start.stats.failed }}"
        listed: "{{ start.results | map(attribute='n') | list }}"
        first: "{{ start.data[0].n }}"
        count: "{{ start | length }}"
      code: "result = total"
"""


def test_a_loop_step_result_has_results_and_stats_and_items_see_loop_index() -> None:
    seen: list[dict[str, Any]] = []

    def item(task: Task) -> Any:
        seen.append(dict(task.args))
        return {"n": task.args["n"]}

    h = upstream(LOOP_SHAPES, start=item, report=echo)
    h.run()
    assert h.status.value == "ok", h.steps
    assert sorted((a["n"], a["at"], a["same"]) for a in seen) == [
        (3, 0, True),
        (4, 1, True),
        (5, 2, True),
    ]
    assert h.finished("report").payload["result"] == {
        "total": 3,
        "failed": 0,
        "listed": [3, 4, 5],
        "first": 3,
        "count": 3,
    }


UNDEFINED_IN_CONDITIONS = """\
workflow:
  - step: start
    tool: {kind: python, input: {}, code: "result = {'n': 1}"}
    next:
      spec: {mode: inclusive}
      arcs:
        - step: never
          when: "{{ start.meta.next_page > 0 }}"
        - step: gated
        - step: after
          when: "{{ start.n == 1 }}"
  - step: never
    tool: {kind: python, code: "result = 0"}
  - step: gated
    when: "{{ ctx.flag.on }}"
    tool: {kind: python, code: "result = 0"}
  - step: after
    tool: {kind: python, code: "result = 2"}
"""


def test_an_undefined_name_in_an_upstream_condition_reads_as_false() -> None:
    h = upstream(UNDEFINED_IN_CONDITIONS, start=lambda t: {"n": 1}, after=lambda t: 2)
    h.run()
    assert h.status.value == "ok", h.steps
    assert h.step_status("after") == "ok"
    assert h.step_status("never") == "skipped"  # never called: skipped at the end
    assert h.step_status("gated") == "skipped"
    [routed] = h.of_type(EventType.NEXT_EVALUATED.value, "start")
    assert [e for e in routed.payload["edges"] if "error" in e] == []  # false, not an error
    [parked] = h.of_type(EventType.STEP_PARKED.value, "gated")
    assert "when_error" not in parked.payload


FAN_OUT_AND_JOIN = """\
workflow:
  - step: start
    tool: {kind: python, input: {}, code: "result = 1"}
    next:
      spec: {mode: inclusive}
      arcs:
        - step: fast
        - step: slow
        - step: never
          when: "{{ false }}"
  - step: fast
    tool: {kind: python, code: "result = 'f'"}
    next:
      arcs: [{step: join}]
  - step: slow
    tool: {kind: python, code: "result = 's'"}
    next:
      arcs: [{step: middle}]
  - step: middle
    tool: {kind: python, code: "result = 'm'"}
    next:
      arcs: [{step: join}]
  - step: never
    tool: {kind: python, code: "result = 'n'"}
    next:
      arcs: [{step: join}]
  - step: join
    tool:
      kind: python
      input: {f: "{{ fast }}", m: "{{ middle }}"}
      code: "result = [f, m]"
"""


def test_an_upstream_join_waits_for_every_branch_taken_and_runs_once() -> None:
    h = upstream(FAN_OUT_AND_JOIN)
    h.complete("start", this=1)
    h.complete("fast", this="f")  # calls join; slow (which leads to it too) still runs
    [parked] = h.of_type(EventType.STEP_PARKED.value, "join")
    assert parked.payload == {"join": ["slow"]}
    assert h.step_status("join") == "parked"
    h.complete("slow", this="s")  # now middle runs, and it can call join too
    assert h.step_status("join") == "parked"
    h.complete("middle", this="m")
    assert h.step_status("join") == "running"
    assert h.task("join").args == {"f": "f", "m": "m"}  # both branches' results
    h.complete("join", this=["f", "m"])
    assert h.status.value == "ok", h.steps()
    assert len(h.of_type(EventType.STEP_STARTED.value, "join")) == 1
