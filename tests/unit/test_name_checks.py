"""The validator's checks of the names templates read: a name nothing defines is E313 (with
the line of the template, the step, the field and a close name), a name only a later step
saves is W413; what the engine does put in a template's context is accepted."""

from __future__ import annotations

import textwrap

from noetl.dsl import Diagnostic, load_playbook_text
from noetl.dsl.templates import name_reads, step_references

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: names
workload:
  user: {name: ann}
  limit: 3
workflow:
"""
FIRST = len(HEAD.splitlines()) + 1  # the line of the first step


def diagnostics(steps: str, *, head: str = HEAD) -> list[Diagnostic]:
    text = head + textwrap.indent(textwrap.dedent(steps).strip("\n"), "  ") + "\n"
    return load_playbook_text(text, "n.yaml").diagnostics


def found(steps: str) -> list[tuple[int | None, str, str | None, str]]:
    """(line relative to the first step, code, step, key) of every E313 / W413."""
    return [
        (None if d.line is None else d.line - FIRST, d.code, d.step, d.key)
        for d in diagnostics(steps)
        if d.code in ("E313", "W413")
    ]


def messages(steps: str) -> list[str]:
    return [d.format() for d in diagnostics(steps) if d.code in ("E313", "W413")]


def test_an_undefined_name_is_an_error_with_its_line_step_field_and_a_close_name() -> None:
    steps = """
        - step: load
          tool: {kind: noop}
          result: {as: users}
          next: show
        - step: show
          tool:
            kind: noop
            args:
              count: "{{ usres | length }}"
        """
    assert found(steps) == [(8, "E313", "show", "workflow[1].tool.args.count")]
    assert messages(steps) == [
        f"n.yaml:{FIRST + 8}: error E313: step 'show': tool.args.count reads 'usres', "
        f"which is not defined; did you mean 'users'? [workflow[1].tool.args.count]"
    ]
    assert not load_playbook_text(HEAD + "  - step: a\n    when: '{{ nope }}'\n").ok


def test_the_line_is_the_one_of_the_name_inside_a_multi_line_template() -> None:
    steps = """
        - step: show
          tool:
            kind: noop
            args:
              text: |
                {% for x in workload.user %}
                {{ x }} of {{ totl }}
                {% endfor %}
        """
    assert found(steps) == [(6, "E313", "show", "workflow[0].tool.args.text")]


def test_a_bare_workload_key_suggests_reading_it_from_workload() -> None:
    [message] = messages(
        """
        - step: greet
          tool: {kind: noop, args: {who: "{{ user.name }}"}}
        """
    )
    assert "reads 'user', which is not defined; did you mean 'workload.user'?" in message


def test_what_the_engine_puts_in_a_template_is_accepted() -> None:
    steps = """
        - step: start
          bind: {size: "{{ workload.limit * 2 }}"}
          loop:
            collection: "{{ range(size) | list }}"
            element: n
            key: "{{ n }}-{{ _loop.index }}"
          tool:
            kind: noop
            args:
              id: "{{ execution_id }}"
              n: "{{ n + size }}"
              ok: "{{ ok('start') or done('start') or step.start.status.done }}"
              token: "{{ secrets.api_token }}"
              text: |
                {% set total = namespace(n=0) %}
                {% for i in [1, 2] %}{{ loop.index }}{% set total.n = total.n + i %}{% endfor %}
                {{ total.n }}
              maybe: "{{ not_saved_anywhere | default('x') }}{{ other is defined }}"
          result:
            pick: "{{ this.v }}"
            collect: {into: values, mode: map, key: "{{ out }}-{{ n }}"}
          next: after
        - step: after
          when: "{{ values | length > 0 }}"
          tool: {kind: noop, retry: {retry_when: "{{ status_code == 503 and attempt < 3 }}"}}
          case:
            - when: "{{ this.ok and values }}"
              then: {set: {seen: "{{ result }}"}, next: last}
        - step: last
          tool: {kind: noop, args: {seen: "{{ seen }}", values: "{{ values }}"}}
        """
    assert found(steps) == []


def test_names_seen_only_by_some_fields_are_errors_elsewhere() -> None:
    steps = """
        - step: start
          bind: {size: 2}
          loop: {collection: "{{ [item] }}"}
          tool: {kind: noop, args: {x: "{{ this }}"}}
          next: [{step: end, when: "{{ size > 1 }}"}]
        - step: end
        """
    assert [(line, code, key) for line, code, _, key in found(steps)] == [
        (2, "E313", "workflow[0].loop.collection"),
        (3, "E313", "workflow[0].tool.args.x"),
        (4, "E313", "workflow[0].next[0].when"),
    ]
    text = "\n".join(messages(steps))
    assert "the loop's element and _loop are seen by the step's tool" in text
    assert "the tool's outcome is seen by result" in text
    assert "bind values are seen by the step's tool, loop, result, retry and case" in text


def test_a_name_only_a_later_step_saves_is_a_warning() -> None:
    steps = """
        - step: first
          tool: {kind: noop, args: {total: "{{ total }}"}}
          next: second
        - step: second
          tool: {kind: noop}
          result: {as: total}
        """
    assert found(steps) == [(1, "W413", "first", "workflow[0].tool.args.total")]
    [message] = messages(steps)
    assert "reads 'total', which only step 'second' saves, and it cannot run before" in message
    assert load_playbook_text(HEAD + textwrap.indent(textwrap.dedent(steps), "  ")).ok


def test_a_name_saved_on_a_path_before_or_waited_for_is_not_a_warning() -> None:
    steps = """
        - step: start
          next: [fetch, count]
        - step: fetch
          tool: {kind: noop}
          result: {as: rows}
          next: report
        - step: count
          tool: {kind: noop}
          case:
            - when: true
              then: {set: {counted: "{{ this }}"}}
        - step: report
          when: "{{ done('count') }}"
          tool: {kind: noop, args: {rows: "{{ rows }}", counted: "{{ counted }}"}}
          next: [{step: again, when: "{{ rows | length < 3 }}"}]
        - step: again
          tool: {kind: noop, args: {rows: "{{ rows }}"}}
          next: fetch
        """
    assert found(steps) == []


def test_a_name_guarded_by_default_is_not_a_warning() -> None:
    steps = """
        - step: first
          tool: {kind: noop, args: {total: "{{ total | default(0) }}"}}
          next: second
        - step: second
          tool: {kind: noop}
          result: {as: total}
        """
    assert found(steps) == []


def test_a_workbook_task_sees_what_its_callers_give_it() -> None:
    head = HEAD.replace(
        "workflow:\n",
        "workbook:\n"
        "  - name: fetch\n"
        "    tool: {kind: noop, args: {id: '{{ user_id }}', n: '{{ item }}'}}\n"
        "    result: {as: fetched}\n"
        "  - name: broken\n"
        "    tool: {kind: noop, args: {id: '{{ usr_id }}'}}\n"
        "workflow:\n",
    )
    steps = """
        - step: start
          bind: {user_id: 7}
          loop: {collection: [1, 2]}
          tool: {kind: workbook, name: fetch}
          next: show
        - step: show
          tool: {kind: noop, args: {got: "{{ fetched }}"}}
        """
    diags = [d for d in diagnostics(steps, head=head) if d.code in ("E313", "W413")]
    assert [(d.code, d.step, d.key) for d in diags] == [
        ("E313", "workbook:broken", "workbook[1].tool.args.id")
    ]
    assert "did you mean 'user_id'?" in diags[0].message


def test_code_sql_descriptions_and_pipeline_tasks_are_not_read_for_names() -> None:
    steps = """
        - step: start
          desc: "shows {{ nothing }}"
          tool:
            kind: python
            code: |
              def main(context, args):
                  return "{{ nothing }}"
        """
    assert found(steps) == []


def test_the_check_can_be_left_out_for_a_test_of_what_a_run_does() -> None:
    text = HEAD + "  - step: a\n    tool: {kind: noop, args: {x: '{{ nope }}'}}\n"
    assert not load_playbook_text(text).ok
    assert load_playbook_text(text, check_names=False).ok


def test_an_upstream_playbook_is_not_checked() -> None:
    text = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: up, path: tests/up}
workload: {message: hi}
workflow:
  - step: start
    tool:
      kind: python
      input: {message: "{{ message }}", later: "{{ finish.value }}", other: "{{ nothing }}"}
      code: |
        result = {"echo": message}
    next:
      - step: finish
  - step: finish
    tool: {kind: noop}
"""
    result = load_playbook_text(text)
    assert result.playbook is not None and result.playbook.dialect == "upstream"
    assert [d.code for d in result.diagnostics if d.code in ("E313", "W413")] == []


def test_reading_the_names_leaves_the_step_references_of_a_template_intact() -> None:
    text = "{{ all_done(['a', 'x']) and wat }}"
    before = step_references(text)
    assert [read.name for read in name_reads(text)] == ["all_done", "wat"]
    assert step_references(text) == before
    assert [ref.name for ref in before] == ["a", "x"]


def test_a_script_path_sees_workload_keys_and_a_sink_retry_its_own_names() -> None:
    steps = """
        - step: run
          tool: {kind: python, spec: {script: "{{ limit }}/x.py"}}
          result:
            sink:
              - file:
                  path: /tmp/out.json
                  retry: {max_attempts: 2, retry_when: "{{ sink_id == 'file_0' }}"}
        - step: other
          tool: {kind: noop, args: {path: "{{ limit }}/x.py"}}
        """
    assert [(code, step) for _, code, step, _ in found(steps)] == [("E313", "other")]


def test_on_a_cycle_a_name_saved_later_in_the_cycle_is_not_a_warning() -> None:
    steps = """
        - step: start
          next: fetch
        - step: fetch
          tool: {kind: noop, args: {page: "{{ cursor }}"}}
          next: check
        - step: check
          tool: {kind: noop}
          result: {as: cursor}
          next: [{step: fetch, when: "{{ cursor.more }}"}, {step: done}]
        - step: done
        """
    codes = [code for _, code, _, _ in found(steps)]
    assert codes == []
    acyclic = steps.replace('[{step: fetch, when: "{{ cursor.more }}"}, {step: done}]', "done")
    assert [code for _, code, _, _ in found(acyclic)] == ["W413"]


def test_the_step_a_failure_policy_routes_to_runs_after_every_step() -> None:
    head_policy = "policy: {on_step_fail: 'route_edge:cleanup'}\n"
    steps = """
        - step: start
          tool: {kind: noop}
          result: {as: started}
        - step: cleanup
          tool: {kind: noop, args: {started: "{{ started }}"}}
        """
    text = HEAD.replace("workflow:\n", head_policy + "workflow:\n")
    text += textwrap.indent(textwrap.dedent(steps).strip("\n"), "  ") + "\n"
    result = load_playbook_text(text, "n.yaml")
    assert [d.code for d in result.diagnostics if d.code in ("E313", "W413")] == []
    without = load_playbook_text(text.replace(head_policy, ""), "n.yaml")
    assert [d.code for d in without.diagnostics if d.code in ("E313", "W413")] == ["W413"]


def test_upstream_names_in_a_native_playbook_say_how_this_language_keeps_values() -> None:
    [message] = messages(
        """
        - step: show
          tool: {kind: noop, args: {page: "{{ ctx.page }}"}}
        """
    )
    assert "reads 'ctx', which is not defined: 'ctx' is upstream NoETL's" in message


def test_a_workload_key_the_playbook_does_not_declare_is_a_warning() -> None:
    steps = """
        - step: show
          tool:
            kind: noop
            args:
              who: "{{ workload.usr.name }}"
              limit: "{{ workload['limit'] }}"
              given: "{{ workload.extra | default(0) }}"
              maybe: "{{ workload.later if workload.later is defined else 1 }}"
        """
    warned = [(d.code, d.line - FIRST if d.line else None, d.message) for d in diagnostics(steps)]
    assert warned == [
        (
            "W414",
            4,
            "tool.args.who reads 'workload.usr', which the playbook's workload does not "
            "declare (did you mean 'workload.user'?): unless it is given at start "
            "(--set usr=...), it is undefined",
        )
    ]


def test_a_playbook_without_a_workload_takes_every_key_at_start() -> None:
    head = HEAD.replace("workload:\n  user: {name: ann}\n  limit: 3\n", "")
    text = head + "  - step: a\n    tool: {kind: noop, args: {x: '{{ workload.anything }}'}}\n"
    assert [d.code for d in load_playbook_text(text, "n.yaml").diagnostics] == []
