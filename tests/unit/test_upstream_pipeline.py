"""Upstream NoETL's tool pipelines and task policy rules, as read and checked.

Small made-up playbooks in upstream's dialect: a list of tasks under `tool` (and a single
tool with `spec.policy.rules`) becomes a `pipeline` tool; each task is checked as the
tool it is, with the line the file has.
"""

from __future__ import annotations

import textwrap
from typing import Any

from noetl.dsl import load_playbook_text
from noetl.dsl.validate import LoadResult

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: sample
workflow:
  - step: start
"""


def load(body: str) -> LoadResult:
    return load_playbook_text(HEAD + textwrap.indent(textwrap.dedent(body), "    "), "s.yaml")


def spec_of(body: str) -> dict[str, Any]:
    result = load(body)
    assert result.errors == [], [d.format() for d in result.errors]
    assert result.playbook is not None
    tool = result.playbook.step("start").tool
    assert tool is not None and tool.kind == "pipeline"
    return tool.spec


def test_a_list_of_tasks_is_a_pipeline_with_labels_rules_and_set() -> None:
    spec = spec_of("""
        tool:
          - name: fetch
            kind: http
            url: "http://example.test/{{ page }}"
            spec:
              policy:
                rules:
                  - when: "{{ output.http.status in [500, 503] }}"
                    then: {do: retry, attempts: 5, backoff: exponential, delay: 0.5}
                  - else:
                      then:
                        do: continue
                        set_ctx: {pages: "{{ _prev }}"}
                        set_iter: {last: 1}
                  - else: {do: break}
          - kind: python
            input: {rows: "{{ _prev.data }}"}
            code: |
              result = len(rows)
            set:
              counted: "{{ output.data }}"
        """)
    first, second = spec["tasks"]
    assert first["name"] == "fetch"
    assert first["tool"] == {
        "kind": "http",
        "spec": {"url": "http://example.test/{{ page }}"},
    }
    assert first["rules"] == [
        {
            "when": "{{ output.http.status in [500, 503] }}",
            "then": {"do": "retry", "attempts": 5, "backoff": "exponential", "delay": 0.5},
        },
        {"then": {"do": "continue", "set": {"ctx.pages": "{{ _prev }}", "iter.last": 1}}},
        {"then": {"do": "break"}},
    ]
    assert second["name"] == "task_2"
    assert second["tool"]["kind"] == "python"
    assert second["tool"]["args"] == {"rows": "{{ _prev.data }}"}
    assert second["tool"]["spec"]["style"] == "toplevel"
    assert second["set"] == {"counted": "{{ output.data }}"}


def test_a_single_tool_with_policy_rules_is_a_pipeline_of_one_task() -> None:
    spec = spec_of("""
        tool:
          kind: python
          code: |
            result = 1
          spec:
            policy:
              rules:
                - when: "{{ output.status == 'error' }}"
                  then: {do: retry, attempts: 3, delay: 0}
        """)
    [task] = spec["tasks"]
    assert task["name"] == "task_1"
    assert task["tool"]["kind"] == "python"
    assert "policy" not in task["tool"]["spec"]
    assert task["rules"][0]["then"]["do"] == "retry"


def test_one_task_without_rules_is_still_that_task() -> None:
    result = load("""
        tool:
          - name: only
            kind: python
            code: |
              result = 1
        """)
    assert result.playbook is not None
    tool = result.playbook.step("start").tool
    assert tool is not None and tool.kind == "python"


def test_a_task_of_an_unknown_kind_is_reported_at_its_line() -> None:
    result = load("""
        tool:
          - name: a
            kind: python
            code: result = 1
          - name: b
            kind: pyhton
            code: result = 2
        """)
    [error] = result.errors
    assert error.code == "E304"
    assert error.line == 13
    assert "did you mean 'python'" in error.message


def test_a_task_of_a_kind_only_upstream_has_is_e331() -> None:
    result = load("""
        tool:
          - name: a
            kind: python
            code: result = 1
          - name: b
            kind: snowflake
            command: select 1
        """)
    [error] = result.errors
    assert error.code == "E331"
    assert error.line == 13


def test_python_syntax_in_a_task_is_checked_at_its_yaml_line() -> None:
    result = load("""
        tool:
          - name: a
            kind: python
            code: result = 1
          - name: b
            kind: python
            code: |
              x = 1
              result = (x
        """)
    [error] = result.errors
    assert error.code == "E312"
    assert error.line == 16
    assert "tool[1].code" in error.message


def test_an_unknown_key_of_a_task_is_reported_at_its_line() -> None:
    result = load("""
        tool:
          - name: a
            kind: http
            url: http://example.test
            retries: 3
        """)
    [error] = result.errors
    assert error.line == 12
    assert "retries" in error.message


def test_a_jump_to_a_task_that_does_not_exist_is_an_error() -> None:
    result = load("""
        tool:
          - name: a
            kind: python
            code: result = 1
            spec:
              policy:
                rules:
                  - else:
                      then: {do: jump, to: nowhere}
        """)
    [error] = result.errors
    assert "jumps to 'nowhere'" in error.message


def test_task_names_are_unique() -> None:
    result = load("""
        tool:
          - name: a
            kind: python
            code: result = 1
          - name: a
            kind: python
            code: result = 2
        """)
    [error] = result.errors
    assert "unique" in error.message


def test_an_unknown_action_is_an_error() -> None:
    result = load("""
        tool:
          - name: a
            kind: python
            code: result = 1
            spec:
              policy:
                rules:
                  - when: "{{ true }}"
                    then: {do: explode}
        """)
    assert result.errors
    assert any("explode" in e.message or "do" in e.message for e in result.errors)
