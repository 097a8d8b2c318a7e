"""Static template checks: syntax, and the steps a template names."""

from __future__ import annotations

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from noetl.dsl import load_playbook_text
from noetl.dsl.render import Renderer
from noetl.dsl.templates import (
    HELPERS,
    StepReference,
    check_syntax,
    is_template,
    make_environment,
    step_references,
)
from noetl.errors import TemplateError, UndefinedNameError


def names(text: str) -> list[tuple[str, str]]:
    return [(r.name, r.via) for r in step_references(text)]


@pytest.mark.parametrize("helper", ["done", "ok", "fail", "running", "loop_done"])
def test_single_step_helpers(helper: str) -> None:
    assert names(f"{{{{ {helper}('load') }}}}") == [("load", f"{helper}()")]
    assert names(f'{{{{ {helper}("load") }}}}') == [("load", f"{helper}()")]


@pytest.mark.parametrize("helper", ["all_done", "any_done"])
def test_list_helpers(helper: str) -> None:
    assert names(f"{{{{ {helper}(['a', 'b']) }}}}") == [
        ("a", f"{helper}()"),
        ("b", f"{helper}()"),
    ]
    assert names(f"{{{{ {helper}(('a', 'c')) }}}}") == [
        ("a", f"{helper}()"),
        ("c", f"{helper}()"),
    ]


def test_every_helper_is_known() -> None:
    assert set(HELPERS) == {"done", "ok", "fail", "running", "loop_done", "all_done", "any_done"}


def test_step_namespace_attribute_and_item() -> None:
    assert names("{{ step.load.status.ok }}") == [("load", "step.<name>")]
    assert names("{{ step['load'].result }}") == [("load", "step[...]")]
    assert names('{{ step["load"]["result"] }}') == [("load", "step[...]")]


def test_several_references_with_lines() -> None:
    text = "{% if ok('a') %}\n{{ step.b.result }}\n{% endif %}\n{{ all_done(['c']) }}"
    refs = step_references(text)
    assert sorted(refs, key=lambda r: r.name) == [
        StepReference("a", "ok()", 1),
        StepReference("b", "step.<name>", 2),
        StepReference("c", "all_done()", 4),
    ]


def test_dynamic_names_and_other_calls_are_ignored() -> None:
    assert names("{{ done(workload.step_name) }}") == []
    assert names("{{ step[name].status }}") == []
    assert names("{{ all_done(workload.steps) }}") == []
    assert names("{{ other('x') }}") == []
    assert names("{{ workload.step.x }}") == []
    assert names("{{ obj.done('x') }}") == []
    assert names("plain text") == []


def test_invalid_template_has_no_references() -> None:
    assert step_references("{{ done('a') ") == []


def test_check_syntax() -> None:
    assert check_syntax("{{ ok('a') and fail('b') }}") is None
    assert check_syntax("{% for x in y %}{{ x }}{% endfor %}") is None
    problem = check_syntax("line 1\n{{ x ) }}")
    assert problem is not None
    assert (problem.message, problem.lineno) == ("unexpected ')'", 2)
    problem = check_syntax("{% if x %}")
    assert problem is not None
    assert problem.message.startswith("Unexpected end of template")


def test_is_template() -> None:
    assert is_template("{{ x }}")
    assert is_template("{% if x %}y{% endif %}")
    assert is_template("{# comment #}")
    assert not is_template("plain")
    assert not is_template(5)
    assert not is_template(None)


def test_environment_is_sandboxed() -> None:
    env = make_environment()
    assert isinstance(env, ImmutableSandboxedEnvironment)
    assert env.from_string("{{ x }}\n").render(x=1) == "1\n"  # keep_trailing_newline


HEAD = """\
apiVersion: noetl.io/v2
metadata:
  name: t
workflow:
  - step: start
    next: b
  - step: b
"""


def test_templates_in_workbook_tasks_are_checked() -> None:
    result = load_playbook_text(
        HEAD
        + """\
workbook:
  - name: task
    tool:
      kind: noop
      args: {x: "{{ ok('nope') }}", y: "{{ bad ) }}"}
""",
        "t.yaml",
    )
    assert [(d.line, d.code, d.step, d.message) for d in result.errors] == [
        (12, "E310", "workbook:task", "template syntax error: unexpected ')'"),
        (12, "E311", "workbook:task", "ok() names step 'nope', which does not exist"),
    ]


def test_constant_condition_warns() -> None:
    result = load_playbook_text(HEAD + "    when: ok('start')\n", "t.yaml")
    assert result.ok
    assert [(d.code, d.line, d.message) for d in result.warnings] == [
        (
            "W404",
            8,
            "'when' is the constant text \"ok('start')\", which is always true; "
            "write it as a template: \"{{ ok('start') }}\"",
        )
    ]


def test_block_scalar_in_a_list_reports_the_right_line() -> None:
    result = load_playbook_text(
        HEAD
        + """\
    loop:
      collection:
        - |
          fine {{ x }}
          broken {{ x ) }}
""",
        "t.yaml",
    )
    assert [(d.line, d.code) for d in result.errors] == [(12, "E310")]


def test_an_undefined_name_in_a_condition_may_read_as_false() -> None:
    renderer = Renderer()
    for condition in ("{{ missing == 1 }}", "{{ page.next }}", "{{ not page.next.cursor }}"):
        assert renderer.truthy(condition, {"page": {}}, undefined_false=True) is False
        with pytest.raises(UndefinedNameError, match="undefined value"):
            renderer.truthy(condition, {"page": {}})
    # other errors stay errors
    with pytest.raises(TemplateError, match="division by zero") as caught:
        renderer.truthy("{{ 1 / 0 }}", {}, undefined_false=True)
    assert not isinstance(caught.value, UndefinedNameError)
    assert renderer.truthy("{{ page is defined and page.n > 1 }}", {"page": {"n": 2}}) is True


def test_a_renderer_keeps_a_bounded_cache_and_renders_the_same_after_eviction() -> None:
    """A long-lived renderer (the sinks', a schedule's) sees every playbook's templates:
    it keeps at most `cache_size` of each kind, and a text whose entry was dropped is
    compiled again with the same result."""
    renderer = Renderer(cache_size=8)
    context = {"n": 3, "who": {"name": "ada"}}
    for i in range(100):
        assert renderer.render(f"{{{{ n + {i} }}}}", context) == 3 + i
        assert renderer.render(f"#{i} {{{{ who.name }}}}", context) == f"#{i} ada"
    caches = (renderer._templates, renderer._expressions, renderer._single, renderer._paths)
    assert all(0 < len(cache) <= 8 for cache in caches)
    assert renderer.render("{{ n + 0 }}", context) == 3  # evicted long ago, compiled again
    assert renderer.render("#0 {{ who.name }}", context) == "#0 ada"
    with pytest.raises(ValueError, match="cache_size"):
        Renderer(cache_size=0)
