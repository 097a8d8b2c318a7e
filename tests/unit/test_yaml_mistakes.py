"""A YAML mistake is reported on the line to fix, not on the later line where the parser
gave up; a key indented into the wrong block says so."""

from __future__ import annotations

import pytest

from noetl.dsl import load_playbook_text

HEAD = "apiVersion: noetl.io/v2\nmetadata:\n  name: m\nworkflow:\n  - step: start\n"


def only_error(text: str) -> tuple[str, int | None, str]:
    result = load_playbook_text(text, "m.yaml")
    [error] = result.errors
    return error.code, error.line, error.message


@pytest.mark.parametrize(
    ("body", "line", "start"),
    [
        # a key without its ':' (the parser notices on the next line)
        ("    tool:\n      kind: noop\n      args\n    next: end\n  - step: end\n", 8, "this line"),
        # a code line indented out of its `|` block
        (
            "    tool:\n      kind: python\n      spec:\n        code: |\n"
            "          def main(context, args):\n        return 1\n    next: end\n"
            "  - step: end\n",
            11,
            "this line",
        ),
        # a '{' left open: the block goes on below it
        (
            "    tool:\n      kind: noop\n      args: {x: 1,\n    next: end\n  - step: end\n",
            8,
            "the '{'",
        ),
        # a quote left open
        ("    desc: 'reads the\n    tool: noop\n", 6, "the quote"),
        # a '[' left open at the end of the file
        ("    next: [end,\n", 6, "the '['"),
    ],
)
def test_the_line_of_the_mistake_not_the_line_the_parser_gave_up_on(
    body: str, line: int, start: str
) -> None:
    code, got, message = only_error(HEAD + body)
    assert (code, got) == ("E005", line)
    assert message.startswith(f"is not valid YAML: {start}")


def test_a_key_without_colon_says_what_is_missing_and_where_it_was_noticed() -> None:
    text = HEAD + "    tool:\n      kind: noop\n      args\n    next: end\n  - step: end\n"
    assert only_error(text)[2] == (
        "is not valid YAML: this line has text but no ':' (a key is written 'key: value'), "
        "or it is indented out of the block it belongs to; the parser noticed it on line 9"
    )


def test_an_error_inside_a_flow_map_written_over_lines_stays_where_it_is() -> None:
    text = HEAD + "    tool:\n      kind: noop\n      args: {x: 1,\n        y: 2 z: 3}\n"
    code, line, message = only_error(text)
    assert (code, line) == ("E005", 9)
    assert "flow mapping started on line 8" in message


def test_a_step_key_indented_under_the_tool_is_named_as_such() -> None:
    text = HEAD + "    tool:\n      kind: noop\n      next: end\n  - step: end\n"
    assert only_error(text) == (
        "E100",
        8,
        "unknown tool key 'next'; 'next' is a step key: is it indented too far, under 'tool'?",
    )


def test_a_tool_key_left_at_the_step_under_an_empty_tool_is_named_as_such() -> None:
    text = HEAD + "    tool:\n    kind: noop\n    next: end\n  - step: end\n"
    code, line, message = only_error(text)
    assert (code, line) == ("E100", 7)
    assert message == (
        "unknown step key 'kind'; 'kind' is a tool key and 'tool' above it is empty: "
        "is 'kind' indented too little?"
    )


def test_an_unknown_key_that_belongs_nowhere_keeps_its_suggestion() -> None:
    text = HEAD + "    tool:\n      kind: noop\n    nxt: end\n  - step: end\n"
    assert only_error(text)[2] == "unknown step key 'nxt'; did you mean 'next'?"


def test_a_line_indented_between_two_blocks_is_named_in_words() -> None:
    text = HEAD + "    tool:\n      kind: noop\n     args: {x: 1}\n    next: end\n  - step: end\n"
    code, line, message = only_error(text)
    assert (code, line) == ("E005", 8)
    assert message.startswith(
        "is not valid YAML: this line is not indented like the lines of its block: "
        "Expected <block end>"
    )
