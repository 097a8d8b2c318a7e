"""Turning pydantic errors into messages: suggestions, union types, paths and lines."""

from __future__ import annotations

import pytest

from noetl.dsl import load_playbook_text
from noetl.dsl.messages import (
    allowed_keys,
    clean_path,
    describe,
    step_name,
    suggest,
    type_name,
)
from noetl.dsl.model import Loop, Playbook, Step

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: messages
"""


def errors(body: str, *, head: str = HEAD) -> list[tuple[int | None, str, str]]:
    result = load_playbook_text(head + body, "m.yaml")
    assert not result.ok
    return [(d.line, d.code, d.message) for d in result.errors]


# --- suggestions -----------------------------------------------------------------------


def test_suggest_close_match() -> None:
    assert suggest("nxt", ["next", "step", "tool"]) == "; did you mean 'next'?"
    assert suggest("colection", ["collection", "element"]) == "; did you mean 'collection'?"


def test_suggest_nothing_when_far() -> None:
    assert suggest("zzz", ["next", "step"]) == ""
    assert suggest("anything", []) == ""


def test_suggest_is_deterministic_between_equal_matches() -> None:
    assert suggest("ab", ["ac", "ab_", "aa"]) == suggest("ab", ["aa", "ab_", "ac"])


def test_allowed_keys_follow_the_model() -> None:
    assert allowed_keys(Playbook, ()) == {
        "apiVersion",
        "kind",
        "metadata",
        "workload",
        "workbook",
        "policy",
        "workflow",
        "triggers",
    }
    assert "max_concurrency" in allowed_keys(Playbook, ("workflow", 0, "loop"))
    assert allowed_keys(Playbook, ("workflow", 0, "loop")) == set(Loop.model_fields)
    # `set` of a step or an arc is upstream NoETL's, never suggested for a native key
    assert allowed_keys(Playbook, ("workflow", 0)) == set(Step.model_fields) - {"set"}
    assert allowed_keys(Playbook, ("workflow", 0, "result")) == {
        "select",
        "pick",
        "as",
        "collect",
        "sink",
    }
    assert allowed_keys(Playbook, ("workload",)) == set()
    assert allowed_keys(Playbook, ("nonsense",)) == set()


def test_unknown_key_suggestions_in_messages() -> None:
    assert errors("workflow:\n  - step: a\n    tool: noop\n    reslt: {as: x}\n") == [
        (8, "E100", "unknown step key 'reslt'; did you mean 'result'?")
    ]
    assert errors("workflow:\n  - step: a\n    bogus_key: 1\n") == [
        (7, "E100", "unknown step key 'bogus_key'")
    ]


def test_unknown_tool_key_suggests_the_kind_configuration() -> None:
    body = "workflow:\n  - step: a\n    tool:\n      kind: postgres\n      querry: select 1\n"
    assert errors(body) == [(9, "E100", "unknown tool key 'querry'; did you mean 'query'?")]


def test_unknown_key_in_a_case_branch() -> None:
    body = "workflow:\n  - step: a\n    case:\n      - when: true\n        then: {nxt: [a]}\n"
    assert errors(body) == [(9, "E100", "unknown case action key 'nxt'; did you mean 'next'?")]


# --- type messages ---------------------------------------------------------------------


def test_union_type_message_lists_every_accepted_type() -> None:
    assert errors("workflow:\n  - step: a\n    when: {x: 1}\n") == [
        (7, "E102", "'when' must be a string or a boolean; got a map")
    ]
    assert errors("workflow:\n  - step: a\n    loop:\n      collection: 7\n") == [
        (8, "E102", "'collection' must be a string or a list; got a number 7")
    ]
    assert errors(
        "  version: [1]\nworkflow:\n  - step: a\n",
    ) == [(5, "E102", "'version' must be a string or an integer or a number; got a list")]


def test_single_type_messages() -> None:
    assert errors("workflow:\n  - step: a\n    bind: [1]\n") == [
        (7, "E102", "'bind' must be a map; got a list")
    ]
    assert errors("workflow:\n  - step: a\n    result: {as: 5}\n") == [
        (7, "E102", "'as' must be a string; got a number 5")
    ]
    assert errors("workflow:\n  - step: a\n    loop: {collection: [], max_concurrency: x}\n") == [
        (7, "E102", "'max_concurrency' must be an integer; got a string 'x'")
    ]
    assert errors("workflow:\n  - step: a\n    loop: {collection: [], max_concurrency: 0}\n") == [
        (7, "E102", "'max_concurrency' must be greater than 0; got a number 0")
    ]
    assert errors("workflow:\n  - step: a\n    retry: {jitter: maybe}\n") == [
        (7, "E102", "'jitter' must be a boolean; got a string 'maybe'")
    ]


def test_null_values_are_described() -> None:
    assert errors("metadata:\nworkflow:\n  - step: a\n", head="") == [
        (1, "E102", "'metadata' must be a map; got null")
    ]


def test_literal_values_are_listed() -> None:
    assert errors("workflow:\n  - step: a\n    loop: {collection: [], mode: paralel}\n") == [
        (7, "E102", "'mode' must be 'sequential' or 'parallel'; got a string 'paralel'")
    ]
    assert errors("kind: Workflow\nmetadata: {name: x}\nworkflow:\n  - step: a\n", head="") == [
        (1, "E102", "'kind' must be 'Playbook'; got a string 'Workflow'")
    ]


def test_missing_keys() -> None:
    assert errors("workload: {}\n") == [
        (1, "E101", "the playbook is missing required key 'workflow'")
    ]
    assert errors("workflow:\n  - desc: no name\n") == [
        (6, "E101", "step is missing required key 'step'")
    ]
    assert errors("workflow:\n  - step: a\n    loop: {element: x}\n") == [
        (7, "E101", "loop is missing required key 'collection'")
    ]
    assert errors("workflow:\n  - step: a\n    tool: {kind: duckdb}\n") == [
        (7, "E101", "duckdb tool is missing required key 'query'")
    ]


def test_names_and_empty_values() -> None:
    assert errors("workflow:\n  - step: my-step\n") == [
        (
            6,
            "E103",
            "'step' must be a name of letters, digits and underscores that does not start "
            "with a digit; got 'my-step'",
        )
    ]
    assert errors("metadata: {name: ''}\nworkflow:\n  - step: a\n", head="") == [
        (1, "E102", "'name' must not be empty; got a string ''")
    ]
    assert errors("workflow:\n  - step: a\n    next: {to: []}\n") == [
        (7, "E102", "'to' must not be empty")
    ]
    long_name = "s" * 129
    assert errors(f"workflow:\n  - step: {long_name}\n")[0][2].startswith(
        "'step' must be at most 128 characters long; got a string 'sss"
    )


def test_policy_on_step_fail_message() -> None:
    assert errors("policy: {on_step_fail: crash}\nworkflow:\n  - step: a\n") == [
        (5, "E102", "'on_step_fail' must be 'halt', 'continue' or 'route_edge:<step>'; got 'crash'")
    ]


def test_model_validator_messages_are_not_repeated() -> None:
    body = "workflow:\n  - step: a\n    result:\n      collect: {into: x, mode: map}\n"
    assert errors(body) == [(8, "E102", "collect with mode: map needs a key template")]
    body = "workflow:\n  - step: a\n    tool: {kind: http, url: u, json: {}, body: b}\n"
    assert errors(body) == [(7, "E102", "http tool takes spec.json or spec.body, not both")]


def test_every_error_of_the_document_is_reported() -> None:
    body = """\
workflow:
  - step: start
    nxt: a
    next: missing
  - step: a
    tool: {kind: http}
    when: "{{ done('ghost') }}"
"""
    assert errors(body) == [
        (7, "E100", "unknown step key 'nxt'; did you mean 'next'?"),
        (8, "E302", "next names step 'missing', which does not exist"),
        (10, "E101", "http tool is missing required key 'url'"),
        (11, "E311", "done() names step 'ghost', which does not exist"),
    ]


# --- helpers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({}, "a map"),
        ([], "a list"),
        (None, "null"),
        (5, "a number 5"),
        (2.5, "a number 2.5"),
        (True, "a boolean true"),
        ("x", "a string 'x'"),
        ("y" * 100, "a string '" + "y" * 56 + "..."),
    ],
)
def test_type_name(value: object, text: str) -> None:
    assert type_name(value) == text


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ((), "root"),
        (("workflow", 0), "step"),
        (("workbook", 1), "workbook task"),
        (("workflow", 0, "tool"), "tool"),
        (("workflow", 0, "tool", "spec"), "tool spec"),
        (("workflow", 0, "next", "to", 1), "next edge"),
        (("workflow", 0, "result", "sink", 0), "sink"),
        (("workflow", 0, "result", "sink", 0, "spec"), "sink spec"),
        (("workflow", 0, "case", 0), "case branch"),
        (("workflow", 0, "case", 0, "then"), "case action"),
        (("workflow", 0, "spec"), "step spec"),
        (("metadata",), "metadata"),
    ],
)
def test_describe(path: tuple[str | int, ...], text: str) -> None:
    assert describe(path) == text


def test_clean_path_drops_union_tags_and_keeps_missing_keys() -> None:
    tree = {"workflow": [{"step": "a", "tool": {"kind": "http"}}]}
    loc = ("workflow", 0, "function-before[_desugar(), Step]", "tool", "spec", "url")
    assert clean_path(tree, loc) == ("workflow", 0, "tool", "spec", "url")
    assert clean_path(tree, ("workflow", 0, "when", "str")) == ("workflow", 0, "when")
    assert clean_path(tree, ("workflow", 3)) == ("workflow",)


def test_step_name() -> None:
    tree = {"workflow": [{"step": "a"}, {"nope": 1}], "workbook": [{"name": "t"}]}
    assert step_name(tree, ("workflow", 0, "tool")) == "a"
    assert step_name(tree, ("workflow", 1)) is None
    assert step_name(tree, ("workbook", 0, "tool")) == "workbook:t"
    assert step_name(tree, ("metadata",)) is None


def test_a_legacy_save_of_nothing_is_only_a_warning() -> None:
    result = load_playbook_text(
        HEAD + "workflow:\n  - step: a\n    tool: noop\n    save:\n", "m.yaml"
    )
    assert result.ok
    assert [(d.code, d.key) for d in result.diagnostics] == [("W201", "workflow[0].save")]
    assert result.require().workflow[0].result is not None
    assert result.require().workflow[0].result.sink == []
