"""Reading files: every way a file can fail to be a YAML playbook gives ONE clear diagnostic."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from noetl.dsl import load_playbook, load_playbook_text
from noetl.dsl.source import (
    MAX_DEPTH,
    MAX_NODES,
    MAX_PLAYBOOK_BYTES,
    SourceError,
    YMap,
    YSeq,
    line_at,
    parse_source,
    read_source,
    to_plain,
)

WritePlaybook = Callable[..., Path]

GOOD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: good
workflow:
  - step: start
    tool: noop
"""


def only_diagnostic(path: Path) -> tuple[str, int | None, str]:
    result = load_playbook(path)
    assert result.ok is False
    assert result.playbook is None
    assert len(result.diagnostics) == 1, [d.format() for d in result.diagnostics]
    diag = result.diagnostics[0]
    assert diag.file == str(path)
    assert "\n" not in diag.format()
    return diag.code, diag.line, diag.message


def write_bytes(tmp_path: Path, data: bytes, name: str = "playbook.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_a_good_file_loads(write_playbook: WritePlaybook) -> None:
    result = load_playbook(write_playbook(GOOD))
    assert result.ok
    assert result.diagnostics == []


def test_malformed_yaml(write_playbook: WritePlaybook) -> None:
    path = write_playbook("metadata:\n  name: [a, b\nworkflow: []\n")
    code, line, message = only_diagnostic(path)
    assert code == "E005"
    assert line == 2  # the '[' left open, not line 3 where the parser noticed it
    assert message == (
        "is not valid YAML: the '[' on this line is never closed "
        "(on line 3: expected ',' or ']', but got ':')"
    )


def test_bad_indentation(write_playbook: WritePlaybook) -> None:
    path = write_playbook("metadata:\n  name: x\n   bad: indent\n")
    assert only_diagnostic(path) == (
        "E005",
        3,
        "is not valid YAML: Mapping values are not allowed here",
    )


def test_tab_indentation(write_playbook: WritePlaybook) -> None:
    code, line, message = only_diagnostic(write_playbook("metadata:\n\tname: x\n"))
    assert (code, line) == ("E005", 2)
    assert message.startswith(
        "is not valid YAML: Found character '\\t' that cannot start any token"
    )


def test_empty_file(tmp_path: Path) -> None:
    path = write_bytes(tmp_path, b"")
    assert only_diagnostic(path) == (
        "E004",
        None,
        "is empty; a playbook needs at least metadata and workflow",
    )


def test_whitespace_only_file(tmp_path: Path) -> None:
    assert only_diagnostic(write_bytes(tmp_path, b"  \n\n\t\n"))[0] == "E004"


def test_comments_only_file(write_playbook: WritePlaybook) -> None:
    path = write_playbook("# a playbook, some day\n\n   # indented comment\n")
    assert only_diagnostic(path) == (
        "E004",
        None,
        "is empty; a playbook needs at least metadata and workflow",
    )


def test_document_marker_only(write_playbook: WritePlaybook) -> None:
    code, _, message = only_diagnostic(write_playbook("---\n"))
    assert code == "E011"
    assert message == "a playbook must be a map with metadata and workflow; got nothing"


def test_binary_file(tmp_path: Path) -> None:
    path = write_bytes(tmp_path, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "image.yaml")
    assert only_diagnostic(path) == ("E003", None, "is a binary file, not YAML text")


def test_non_utf8_file(tmp_path: Path) -> None:
    path = write_bytes(tmp_path, "metadata:\n  name: café\n".encode("latin-1"))
    assert only_diagnostic(path) == ("E003", 2, "is not UTF-8 text (byte 0xe9 on line 2)")


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    result = load_playbook(write_bytes(tmp_path, GOOD.encode("utf-8-sig")))
    assert result.ok
    assert result.require().metadata.name == "good"


def test_control_character(tmp_path: Path) -> None:
    path = write_bytes(tmp_path, b"metadata:\n  name: \x07bell\n")
    assert only_diagnostic(path) == (
        "E005",
        2,
        "is not valid YAML: character U+0007 is not allowed (special characters are not allowed)",
    )


def test_file_over_the_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:
        handle.write(b"workload:\n  data: '")
        handle.write(b"x" * (10 * 1024 * 1024))
        handle.write(b"'\n")
    started = time.monotonic()
    code, line, message = only_diagnostic(path)
    assert time.monotonic() - started < 1.0  # refused from its size, not parsed
    assert (code, line) == ("E002", None)
    assert message == (
        "file is 10.5 MB; a playbook may be at most 4 MB (move data into the workload or a file)"
    )


def test_text_over_the_size_limit_from_the_api() -> None:
    result = load_playbook_text("a: '" + "x" * MAX_PLAYBOOK_BYTES + "'\n", "api")
    assert [d.code for d in result.diagnostics] == ["E002"]
    result = load_playbook_text(b"a: '" + b"x" * MAX_PLAYBOOK_BYTES + b"'\n", "api")
    assert [d.code for d in result.diagnostics] == ["E002"]


def test_duplicate_top_level_keys(write_playbook: WritePlaybook) -> None:
    path = write_playbook(GOOD + "metadata:\n  name: again\n")
    assert only_diagnostic(path) == (
        "E007",
        8,
        "duplicate key 'metadata' (the mapping starts on line 1)",
    )


def test_duplicate_nested_keys(write_playbook: WritePlaybook) -> None:
    text = GOOD.replace("    tool: noop\n", "    tool: noop\n    tool: python\n")
    assert only_diagnostic(write_playbook(text)) == (
        "E007",
        8,
        "duplicate key 'tool' (the mapping starts on line 6)",
    )


def test_multiple_documents(write_playbook: WritePlaybook) -> None:
    path = write_playbook(GOOD + "---\n" + GOOD)
    assert only_diagnostic(path) == (
        "E006",
        None,
        "holds several YAML documents; put one playbook per file",
    )


def test_a_trailing_document_marker_is_not_a_second_document(write_playbook: WritePlaybook) -> None:
    result = load_playbook(write_playbook("---\n" + GOOD + "---\n"))
    assert result.ok, [d.format() for d in result.diagnostics]
    result = load_playbook(write_playbook(GOOD + "...\n"))
    assert result.ok


def test_yaml_alias_bomb(write_playbook: WritePlaybook) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        refs = ", ".join([f"*{prev}"] * 10)
        lines.append(f"{name}: &{name} [{refs}]")
    path = write_playbook("\n".join(lines) + "\n")
    started = time.monotonic()
    code, line, message = only_diagnostic(path)
    assert time.monotonic() - started < 5.0
    assert code == "E008"
    assert line is not None
    assert message == f"has more than {MAX_NODES} YAML nodes (alias expansion?)"


def test_deep_nesting(write_playbook: WritePlaybook) -> None:
    path = write_playbook("workload: " + "[" * 500 + "]" * 500 + "\n")
    assert only_diagnostic(path) == ("E012", 1, f"nests more than {MAX_DEPTH} levels deep")


def test_deep_nesting_through_aliases(write_playbook: WritePlaybook) -> None:
    lines = ["a0: &a0 [1]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, MAX_DEPTH + 2)]
    code, _, message = only_diagnostic(write_playbook("\n".join(lines) + "\n"))
    assert (code, message) == ("E012", f"nests more than {MAX_DEPTH} levels deep")


@pytest.mark.parametrize(
    ("text", "line", "tag"),
    [
        ("metadata:\n  name: !include name.txt\nworkflow: []\n", 2, "!include"),
        ("metadata: !include meta.yaml\nworkflow: []\n", 1, "!include"),
        ("metadata:\n  name: x\nworkflow: !steps\n  - step: a\n", 3, "!steps"),
        ("metadata: !!set {a, b}\n", 1, "!!set"),
        ("metadata: !!omap [{name: x}]\n", 1, "!!omap"),
        ("metadata:\n  name: !!binary aGVsbG8=\n", 2, "!!binary"),
        (
            "metadata:\n  name: !!python/object:os.system ls\n",
            2,
            "tag:yaml.org,2002:python/object:os.system",
        ),
    ],
)
def test_yaml_tags_are_refused(
    write_playbook: WritePlaybook, text: str, line: int, tag: str
) -> None:
    path = write_playbook(text)
    assert only_diagnostic(path) == ("E010", line, f"YAML tag {tag!r} is not supported")


def test_the_str_tag_is_a_string(write_playbook: WritePlaybook) -> None:
    result = load_playbook(write_playbook(GOOD.replace("name: good", "name: !!str 1234")))
    assert result.ok
    assert result.require().metadata.name == "1234"


@pytest.mark.parametrize(
    ("key_text", "got"),
    [("1: x", "a number 1"), ("~: x", "null"), ("? [a, b]\n: x", "a list")],
)
def test_mapping_keys_must_be_strings(
    write_playbook: WritePlaybook, key_text: str, got: str
) -> None:
    code, line, message = only_diagnostic(write_playbook(GOOD + key_text + "\n"))
    assert (code, line) == ("E009", 8)
    assert message == f"map keys must be strings, got {got}"


def test_missing_file(tmp_path: Path) -> None:
    assert only_diagnostic(tmp_path / "nope.yaml") == ("E001", None, "file not found")


def test_directory(tmp_path: Path) -> None:
    assert only_diagnostic(tmp_path) == ("E001", None, "is a directory, not a playbook file")


def test_document_that_is_a_list(write_playbook: WritePlaybook) -> None:
    assert only_diagnostic(write_playbook("# comment\n- step: a\n- step: b\n")) == (
        "E011",
        2,
        "a playbook must be a map with metadata and workflow; got a list",
    )


def test_document_that_is_a_scalar(write_playbook: WritePlaybook) -> None:
    assert only_diagnostic(write_playbook("# comment\n\n42\n")) == (
        "E011",
        3,
        "a playbook must be a map with metadata and workflow; got a number 42",
    )


def test_read_source_raises_source_error_with_the_diagnostic(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as info:
        read_source(write_bytes(tmp_path, b""))
    assert info.value.diagnostic.code == "E004"
    assert str(info.value) == info.value.diagnostic.format()


def test_positions_are_kept() -> None:
    source = parse_source(GOOD, "good.yaml")
    tree = source.tree
    assert isinstance(tree, YMap)
    assert tree.key_line("workflow") == 5
    steps = tree["workflow"]
    assert isinstance(steps, YSeq)
    assert steps.item_line(0) == 6
    assert steps[0].key_line("tool") == 7
    assert line_at(tree, ("workflow", 0, "tool")) == 7
    # parts of a path the tree does not have are skipped: the deepest known line wins
    assert line_at(tree, ("workflow", 0, "tool", "spec", "url")) == 7
    assert line_at(tree, ("workflow", 5)) == 5
    assert to_plain(tree) == {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": "good"},
        "workflow": [{"step": "start", "tool": "noop"}],
    }
    assert type(to_plain(tree)) is dict


def test_scalars_are_plain_python_values() -> None:
    source = parse_source(
        "a: true\nb: 3\nc: 1.5\nd: text\ne: ~\nf: 2024-01-02\ng: 0x10\n", "s.yaml"
    )
    values = to_plain(source.tree)
    assert values == {
        "a": True,
        "b": 3,
        "c": 1.5,
        "d": "text",
        "e": None,
        "f": "2024-01-02",
        "g": 16,
    }
    assert [type(v) for v in values.values()] == [bool, int, float, str, type(None), str, int]
