"""Code and SQL are taken literally: the validator compiles inline python as written (E312,
at the file line of the offending code line, for steps, workbook tasks and case branches),
does not read code or SQL as templates, and warns about a template written into them
(W412), which would run as it is."""

from __future__ import annotations

import textwrap

import pytest

from noetl.dsl import Diagnostic, load_playbook_text
from noetl.dsl.code_checks import python_syntax, python_template, sql_template

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: code_checks
"""
FIRST = len(HEAD.splitlines()) + 1  # the line after the head


def diagnostics(body: str) -> list[Diagnostic]:
    return load_playbook_text(HEAD + textwrap.dedent(body).lstrip("\n"), "c.yaml").diagnostics


def seen(body: str) -> list[tuple[int | None, str, str | None, str, str]]:
    """(file line, code, step, key, message) of every diagnostic."""
    return [(d.line, d.code, d.step, d.key, d.message) for d in diagnostics(body)]


def test_a_syntax_error_in_a_block_scalar_points_at_its_line() -> None:
    assert seen(
        """
        workflow:
          - step: start
            tool:
              kind: python
              spec:
                code: |
                  def main(context, args):

                      return [1, 2
        """
    ) == [
        (
            FIRST + 8,
            "E312",
            "start",
            "workflow[0].tool.spec.code",
            "python syntax error in tool.spec.code: '[' was never closed (code line 3)",
        )
    ]


def test_a_syntax_error_in_a_quoted_one_liner_points_at_that_line() -> None:
    [diag] = diagnostics(
        """
        workflow:
          - step: start
            tool: {kind: python, code: "def main(context, args):\\n    return 1 +\\n"}
        """
    )
    assert (diag.code, diag.line, diag.key) == ("E312", FIRST + 2, "workflow[0].tool.code")
    assert diag.message == "python syntax error in tool.code: invalid syntax (code line 2)"


def test_code_with_braces_is_still_compiled() -> None:
    """Code holding `{{` used to be taken for a template and left unchecked."""
    [diag] = diagnostics(
        """
        workflow:
          - step: start
            tool:
              kind: python
              code: |
                def main(context, args):
                    label = f"{{{args['x']}}}"
                    return label +
        """
    )
    assert (diag.code, diag.line, diag.message) == (
        "E312",
        FIRST + 7,
        "python syntax error in tool.code: invalid syntax (code line 3); code is not a "
        "template: pass values in tool.args",
    )


def test_workbook_tasks_and_case_branches_are_compiled_too() -> None:
    found = seen(
        """
        workbook:
          - name: task
            tool:
              kind: python
              code: |
                def main(context, args)
                    return 1
        workflow:
          - step: start
            tool: {kind: workbook, name: task}
            case:
              - when: true
                then:
                  tool:
                    kind: python
                    spec:
                      code: |
                        def main(context, args):
                            return )
        """
    )
    assert found == [
        (
            FIRST + 5,
            "E312",
            "workbook:task",
            "workbook[0].tool.code",
            "python syntax error in tool.code: expected ':' (code line 1)",
        ),
        (
            FIRST + 18,
            "E312",
            "start",
            "workflow[0].case[0].then.tool.spec.code",
            "python syntax error in case[0].then.tool.spec.code: unmatched ')' (code line 2)",
        ),
    ]


def test_code_and_sql_are_not_read_as_templates() -> None:
    """`{{ {x} }}` is no valid template, and a template's helpers name no steps here."""
    assert (
        seen(
            """
            workflow:
              - step: start
                tool:
                  kind: python
                  code: |
                    def main(context, args):
                        done = lambda name: name
                        return f"{{ {done('nowhere')} }}"
                next: load
              - step: load
                tool:
                  kind: duckdb
                  query: "SELECT '{% raw' AS a, $n AS n"
                  args: {n: "{{ workload.n }}"}
            """
        )
        == []
    )


def test_a_template_written_into_code_is_a_warning() -> None:
    assert seen(
        """
        workflow:
          - step: start
            tool:
              kind: python
              code: |
                def main(context, args):
                    return {{ workload.n }}
        """
    ) == [
        (
            FIRST + 6,
            "W412",
            "start",
            "workflow[0].tool.code",
            "tool.code holds '{{', but code is taken literally, never rendered as a template; "
            "pass values in tool.args and read them from args",
        )
    ]


def test_a_template_written_into_sql_is_a_warning() -> None:
    assert seen(
        """
        workflow:
          - step: start
            tool:
              kind: postgres
              spec:
                query: |
                  SELECT id -- {{ not this }}
                  FROM users
                  WHERE team = {{ workload.team }} AND note <> '{{ nor this }}'
                dsn: postgresql://localhost/db
        """
    ) == [
        (
            FIRST + 8,
            "W412",
            "start",
            "workflow[0].tool.spec.query",
            "tool.spec.query holds a template, but SQL is taken literally, never rendered; "
            "pass values as query parameters from tool.args",
        )
    ]


@pytest.mark.parametrize(
    ("code", "line"),
    [
        ("x = {{1}}\n", 1),
        ("a = 1\nb = {{ a }}\n", 2),
        ('x = f"{{a}}"\n', None),
        ("x = {'a': {'b': 1}}\n", None),
        ("x = '{{ a }}'  # {{ b }}\n", None),
        ("x = { {1} }\n", None),
    ],
)
def test_python_template(code: str, line: int | None) -> None:
    assert python_template(code) == line


def test_sql_template_skips_quoted_text_and_comments() -> None:
    assert sql_template("select 1") is None
    assert sql_template("select '{{x}}', \"{%y\" /* {{ z\n }} */") is None
    assert sql_template("select 1\n-- {{ a }}\nwhere a = {% if b %}") == 3


def test_python_syntax() -> None:
    assert python_syntax("def main(context, args):\n    return 1\n") is None
    problem = python_syntax("x = (\n")
    assert problem is not None
    assert problem.lineno == 1
