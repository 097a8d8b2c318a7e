"""`noetl.dsl.codemod`: legacy forms rewritten into canonical DSL v2, comments kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from noetl.dsl import load_playbook_text
from noetl.dsl.codemod import CodemodResult, rewrite_file, rewrite_text
from noetl.errors import PlaybookError

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"
EXPECTED = LEGACY / "expected"
REWRITTEN = ["iter_forms.yaml", "save_forms.yaml", "four_space.yaml"]
HEAD = "metadata:\n  name: t\nworkflow:\n"


def rewrite(body: str) -> CodemodResult:
    return rewrite_text(HEAD + body)


def body_of(result: CodemodResult) -> str:
    assert result.text.startswith(HEAD)
    return result.text[len(HEAD) :]


# --- each rewrite ------------------------------------------------------------------------


def test_iter_string_becomes_loop_collection_keeping_its_comment() -> None:
    result = rewrite('  - step: a\n    iter: "{{ workload.xs }}"  # the xs\n    tool: noop\n')
    assert body_of(result) == (
        '  - step: a\n    loop:\n      collection: "{{ workload.xs }}"  # the xs\n    tool: noop\n'
    )
    assert result.changed is True
    assert result.notes == ["line 5: step 'a': 'iter' -> 'loop'"]


@pytest.mark.parametrize("key", ["iter", "iterator", "over", "coll"])
def test_every_legacy_loop_key_becomes_loop_in_the_same_place(key: str) -> None:
    result = rewrite(f"  - step: a\n    {key}: [1, 2]\n    tool: noop\n    next: b\n  - step: b\n")
    assert body_of(result) == (
        "  - step: a\n"
        "    loop:\n"
        "      collection: [1, 2]\n"
        "    tool: noop\n"
        "    next: b\n"
        "  - step: b\n"
    )
    assert result.notes == [f"line 5: step 'a': '{key}' -> 'loop'"]


def test_legacy_block_is_renamed_and_its_aliases_rewritten() -> None:
    result = rewrite(
        "  - step: a\n"
        "    tool: noop\n"
        "    over:   # per user\n"
        '      in: "{{ workload.users }}"\n'
        "      iterator: user\n"
        "      spec:   # how many at once\n"
        "        mode: parallel   # fast\n"
        "        max_in_flight: 3\n"
        "      until: \"{{ user == 'x' }}\"\n"
        "    next: b\n"
        "  - step: b\n"
    )
    assert body_of(result) == (
        "  - step: a\n"
        "    tool: noop\n"
        "    loop:   # per user\n"
        '      collection: "{{ workload.users }}"\n'
        "      element: user\n"
        "      # how many at once\n"
        "      mode: parallel   # fast\n"
        "      max_concurrency: 3\n"
        "      until: \"{{ user == 'x' }}\"\n"
        "    next: b\n"
        "  - step: b\n"
    )
    assert result.notes == [
        "line 6: step 'a': 'over' -> 'loop'",
        "line 7: step 'a': loop 'in' -> 'collection'",
        "line 8: step 'a': loop 'iterator' -> 'element'",
        "line 10: step 'a': loop 'spec.mode' -> 'mode'",
        "line 11: step 'a': loop 'spec.max_in_flight' -> 'max_concurrency'",
    ]


def test_aliases_inside_a_canonical_loop_are_rewritten() -> None:
    result = rewrite(
        "  - step: a\n    loop: {in: [1, 2], iterator: n, spec: {mode: parallel}}\n    tool: noop\n"
    )
    assert body_of(result) == (
        "  - step: a\n    loop: {collection: [1, 2], element: n, mode: parallel}\n    tool: noop\n"
    )


def test_save_becomes_result_sink_where_save_was() -> None:
    result = rewrite(
        "  - step: a\n"
        "    tool: noop\n"
        "    save:   # keep a copy\n"
        "      file:\n"
        "        path: out.json   # relative\n"
        "    next: b\n"
        "  - step: b\n"
    )
    assert body_of(result) == (
        "  - step: a\n"
        "    tool: noop\n"
        "    result:   # keep a copy\n"
        "      sink:\n"
        "        - file:\n"
        "            path: out.json   # relative\n"
        "    next: b\n"
        "  - step: b\n"
    )
    assert result.notes == ["line 6: step 'a': 'save' -> 'result.sink'"]


def test_save_list_is_appended_to_an_existing_single_sink() -> None:
    result = rewrite(
        "  - step: a\n"
        "    tool: noop\n"
        "    result:\n"
        "      as: r\n"
        "      sink: {file: {path: a.json}}\n"
        "    save:\n"
        "      - file: {path: b.json}\n"
        "      - postgres: {table: t}\n"
    )
    assert body_of(result) == (
        "  - step: a\n"
        "    tool: noop\n"
        "    result:\n"
        "      as: r\n"
        "      sink:\n"
        "        - {file: {path: a.json}}\n"
        "        - file: {path: b.json}\n"
        "        - postgres: {table: t}\n"
    )


def test_save_goes_into_an_existing_result_without_sink() -> None:
    result = rewrite(
        "  - step: a\n"
        "    result:\n"
        "      as: r\n"
        "    tool: noop\n"
        "    save: {file: {path: b.json}}   # copy\n"
    )
    assert body_of(result) == (
        "  - step: a\n"
        "    result:\n"
        "      as: r\n"
        "      sink:\n"
        "        - {file: {path: b.json}}   # copy\n"
        "    tool: noop\n"
    )


def test_tool_result_moves_up_right_after_tool() -> None:
    result = rewrite(
        "  - step: a\n"
        "    tool:\n"
        "      kind: noop\n"
        "      result:   # what to keep\n"
        "        as: r   # the name\n"
        "      timeout_ms: 100\n"
        "    next: b\n"
        "  - step: b\n"
    )
    assert body_of(result) == (
        "  - step: a\n"
        "    tool:\n"
        "      kind: noop\n"
        "      timeout_ms: 100\n"
        "    result:   # what to keep\n"
        "      as: r   # the name\n"
        "    next: b\n"
        "  - step: b\n"
    )
    assert result.notes == ["line 7: step 'a': 'tool.result' -> 'result'"]


def test_tool_result_then_save_end_up_in_one_result() -> None:
    result = rewrite(
        "  - step: a\n"
        "    tool:\n"
        "      kind: noop\n"
        "      result: {as: r}\n"
        "    save: {file: {path: b.json}}\n"
    )
    assert body_of(result) == (
        "  - step: a\n"
        "    tool:\n"
        "      kind: noop\n"
        "    result: {as: r, sink: [{file: {path: b.json}}]}\n"
    )
    check = load_playbook_text(result.text, allow_legacy=False)
    assert check.ok, check.diagnostics


def test_tool_result_in_a_workbook_task_moves_up() -> None:
    text = (
        "metadata:\n  name: t\n"
        "workbook:\n"
        "  - name: task\n"
        "    tool:\n"
        "      kind: noop\n"
        "      result: {as: r}\n"
        "workflow:\n"
        "  - step: a\n"
        "    tool: {kind: workbook, name: task}\n"
    )
    result = rewrite_text(text)
    assert result.text == text.replace("      result: {as: r}\n", "").replace(
        "workflow:\n", "    result: {as: r}\nworkflow:\n"
    )
    assert result.notes == ["line 7: workbook task 'task': 'tool.result' -> 'result'"]


# --- what is left for a person -------------------------------------------------------------


def test_tool_iterator_is_left_alone_with_a_note() -> None:
    path = LEGACY / "tool_iterator.yaml"
    result = rewrite_file(path)
    assert result.changed is False
    assert result.text == path.read_text(encoding="utf-8")
    assert result.notes == [
        "line 7: step 'start': 'tool: iterator' cannot be rewritten automatically; rewrite it "
        "by hand as a 'loop:' block on the step (loop: {collection: ..., element: ...})"
    ]


@pytest.mark.parametrize(
    ("body", "note"),
    [
        (
            "  - step: a\n    loop: {collection: [1]}\n    iter: [2]\n",
            "line 6: step 'a': has both 'loop' and legacy 'iter'; keep one by hand",
        ),
        (
            "  - step: a\n    loop: {in: [1], collection: [2]}\n",
            "line 5: step 'a': loop has both 'in' and 'collection'; keep one by hand",
        ),
        (
            "  - step: a\n    loop:\n      collection: [1]\n      spec: {mode: parallel, x: 1}\n",
            "line 7: step 'a': loop 'spec' left as is: unknown key 'x'",
        ),
        (
            "  - step: a\n    tool: {kind: noop, result: {as: x}}\n    result: {as: y}\n",
            "line 5: step 'a': 'result' is given both on the step and inside 'tool'; "
            "merge them by hand",
        ),
        (
            "  - step: a\n    save: out.json\n",
            "line 5: step 'a': 'save' left as is: it must be a sink map or a list of sinks",
        ),
    ],
)
def test_conflicts_are_reported_and_left_alone(body: str, note: str) -> None:
    result = rewrite(body)
    assert result.changed is False
    assert result.text == HEAD + body
    assert result.notes == [note]


def test_a_legacy_key_from_a_merge_is_reported_not_rewritten() -> None:
    text = (
        "metadata:\n  name: t\n"
        "workload:\n  defaults: &d\n    iter: [1, 2]\n"
        "workflow:\n  - step: a\n    <<: *d\n    tool: noop\n"
    )
    result = rewrite_text(text)
    assert result.changed is False
    assert result.text == text
    assert result.notes == [
        "line 7: step 'a': legacy 'iter' comes from a '<<' merge; rewrite it where it is defined"
    ]


# --- comments, layout, idempotence -----------------------------------------------------------


def test_comments_stay_next_to_the_same_keys() -> None:
    lines = rewrite_file(LEGACY / "iter_forms.yaml").text.splitlines()
    assert lines[0] == "# Legacy iteration keys: iter, iterator, over and coll."
    assert "  name: legacy_iter_forms   # kept as is" in lines
    fan = lines.index("    loop:   # the upstream block form")
    assert lines[fan - 1] == "  - step: fan"
    assert lines[fan + 1] == '      collection: "{{ workload.users }}"'
    users = lines.index('      collection: "{{ workload.users }}"  # the users to greet')
    assert lines[users - 1] == "    loop:"
    assert "      mode: parallel   # at most two at a time" in lines


def test_comment_lines_after_a_moved_block_keep_their_column() -> None:
    lines = rewrite_file(LEGACY / "save_forms.yaml").text.splitlines()
    after = lines.index("    # the last step follows")
    assert lines[after - 1] == "        - file: {path: out/d.json}"
    assert lines[after + 1] == "    next: done"
    inside = lines.index("            # under out/")
    assert lines[inside + 1] == "            path: out/single.json"


def test_comment_lines_inside_a_moved_block_move_with_it() -> None:
    result = rewrite(
        "  - step: a\n"
        "    tool:\n"
        "      kind: noop\n"
        "      result:\n"
        "        as: r\n"
        "        # then pick\n"
        "        pick: x\n"
        "    save:\n"
        "      file:\n"
        "        path: a.json\n"
        "        # the sink id\n"
        "        id: s1\n"
        "    # next comes last\n"
        "    next: b\n"
        "  - step: b\n"
    )
    assert body_of(result) == (
        "  - step: a\n"
        "    tool:\n"
        "      kind: noop\n"
        "    result:\n"
        "      as: r\n"
        "      # then pick\n"
        "      pick: x\n"
        "      sink:\n"
        "        - file:\n"
        "            path: a.json\n"
        "            # the sink id\n"
        "            id: s1\n"
        "    # next comes last\n"
        "    next: b\n"
        "  - step: b\n"
    )


@pytest.mark.parametrize("name", REWRITTEN)
def test_rewrite_matches_the_expected_file(name: str) -> None:
    result = rewrite_file(LEGACY / name)
    assert result.changed is True
    assert result.text == (EXPECTED / name).read_text(encoding="utf-8")


def test_four_space_indentation_and_document_start_are_kept() -> None:
    text = rewrite_file(LEGACY / "four_space.yaml").text
    assert text.startswith("---\n# Four-space indentation")
    assert (
        "-   step: write\n    tool: noop\n    result:\n        sink:\n        -   file:\n" in text
    )


@pytest.mark.parametrize("name", [*REWRITTEN, "canonical.yaml", "tool_iterator.yaml"])
def test_running_twice_gives_the_same_text(name: str) -> None:
    first = rewrite_file(LEGACY / name)
    second = rewrite_text(first.text)
    assert second.changed is False
    assert second.text == first.text


def test_a_canonical_file_is_left_byte_for_byte() -> None:
    path = LEGACY / "canonical.yaml"
    result = rewrite_file(path)
    assert result == CodemodResult(text=path.read_text(encoding="utf-8"), changed=False, notes=[])


@pytest.mark.parametrize("name", REWRITTEN)
def test_output_validates_without_legacy_and_means_the_same(name: str) -> None:
    source = (LEGACY / name).read_text(encoding="utf-8")
    before = load_playbook_text(source, allow_legacy=True)
    assert before.ok, before.diagnostics
    assert any(d.code == "W201" for d in before.warnings)
    after = load_playbook_text(rewrite_text(source).text, allow_legacy=False)
    assert after.ok, after.diagnostics
    assert [d.code for d in after.diagnostics if d.code == "W201"] == []
    assert before.playbook is not None and after.playbook is not None
    assert after.playbook.model_dump() == before.playbook.model_dump()


# --- errors ----------------------------------------------------------------------------------


def test_unparsable_text_raises_playbook_error_with_the_line() -> None:
    with pytest.raises(PlaybookError) as info:
        rewrite_text("metadata:\n  name: t\nworkflow: [\n", "bad.yaml")
    (diag,) = info.value.diagnostics
    assert (diag.code, diag.file, diag.line) == ("E005", "bad.yaml", 3)  # the open '['


def test_duplicate_keys_are_refused_like_validate_does() -> None:
    with pytest.raises(PlaybookError) as info:
        rewrite_text("metadata:\n  name: t\nmetadata:\n  name: u\n", "dup.yaml")
    assert [d.code for d in info.value.diagnostics] == ["E007"]


def test_a_missing_file_raises_playbook_error(tmp_path: Path) -> None:
    with pytest.raises(PlaybookError) as info:
        rewrite_file(tmp_path / "nope.yaml")
    assert [d.code for d in info.value.diagnostics] == ["E001"]


# --- any mix of legacy forms -----------------------------------------------------------------

LOOPS = st.sampled_from(
    [
        "",
        '    iter: "{{ workload.xs }}"  # xs\n',
        "    coll: [1, 2]\n",
        "    over:\n      - 1\n      - 2\n",
        "    iterator:\n      in: [1]\n      iterator: n\n      spec: {mode: parallel}\n",
        "    loop:   # canonical\n      collection: [1]\n      spec:\n        max_in_flight: 2\n",
    ]
)
RESULTS = st.sampled_from(
    [
        "",
        "    result: {as: r}\n",
        "    result:\n      as: r\n      sink: {file: {path: a.json}}\n",
    ]
)
TOOLS = st.sampled_from(
    [
        "    tool: noop\n",
        "    tool:\n      kind: noop\n      result:   # r\n        as: q\n",
    ]
)
SAVES = st.sampled_from(
    [
        "",
        "    save: {file: {path: b.json}}   # b\n",
        "    save:\n      - file: {path: c.json}\n      - file: {path: d.json}\n",
    ]
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(LOOPS, TOOLS, RESULTS, SAVES, st.permutations(range(4))), max_size=3))
def test_any_valid_legacy_mix_rewrites_to_the_same_playbook(
    steps: list[tuple[str, str, str, str, list[int]]],
) -> None:
    text = HEAD
    for index, (loop, tool, result, save, order) in enumerate(steps):
        parts = [loop, tool, result, save]
        text += f"  - step: s{index}\n" + "".join(parts[i] for i in order)
    text += "  - step: end\n"
    before = load_playbook_text(text, allow_legacy=True)
    rewritten = rewrite_text(text)
    again = rewrite_text(rewritten.text)
    assert again.text == rewritten.text
    assert again.changed is False
    if not before.ok:
        return
    after = load_playbook_text(rewritten.text, allow_legacy=False)
    assert after.ok, (rewritten.text, after.diagnostics)
    assert not any(d.code == "W201" for d in after.diagnostics)
    assert before.playbook is not None and after.playbook is not None
    assert after.playbook.model_dump() == before.playbook.model_dump()


def test_windows_line_ends_are_kept() -> None:
    text = (HEAD + "  - step: a\n    coll: [1]\n    tool: noop\n").replace("\n", "\r\n")
    result = rewrite_text(text)
    assert result.text == text.replace(
        "    coll: [1]\r\n", "    loop:\r\n      collection: [1]\r\n"
    )


def test_a_result_brought_in_by_a_merge_is_not_written_to() -> None:
    text = (
        "metadata:\n  name: t\n"
        "workload:\n  shared: &r\n    as: x\n"
        "workflow:\n  - step: a\n    <<: {result: *r}\n    tool: noop\n"
        "    save: {file: {path: a.json}}\n"
    )
    result = rewrite_text(text)
    assert result.changed is False
    assert result.notes == [
        "line 10: step 'a': 'save' left as is: the step's 'result' comes from a '<<' merge"
    ]
