"""What the `playbook` tool reads of a child besides starting it: the files a playbook
path may name, a child text's step names, one step's result from a child's log; and
`return_step` / `job` in upstream NoETL's dialect."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Event, EventType, ExecutionStatus, StoreUnavailableError, Task
from noetl.dsl import load_playbook_text
from noetl.errors import PathRefusedError
from noetl.store.base import Append, ExecutionRecord
from noetl.store.memory import MemoryStore
from noetl.tools.child_steps import StepNames, file_candidates, find_file, step_result
from noetl.tools.playbook import PlaybookTool, child_execution_id
from tests.unit.engine_harness import Harness

CHILD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child}
workflow:
  - step: first
    tool: {kind: noop}
    next: [{step: second}]
  - step: second
    tool: {kind: noop}
"""

UPSTREAM_HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: parent
  path: tests/upstream/parent
"""


def test_file_candidates_try_the_path_its_suffixes_then_the_file_named_after_it() -> None:
    assert file_candidates("a/b") == ["a/b", "a/b.yaml", "a/b.yml", "a/b/b.yaml", "a/b/b.yml"]
    assert file_candidates("a/b/") == file_candidates("a/b")
    assert file_candidates("a/b.yaml") == ["a/b.yaml"]
    assert file_candidates("b.yml") == ["b.yml"]
    assert file_candidates("") == []


def test_step_names_of_a_text_and_none_for_an_invalid_one() -> None:
    names = StepNames(size=1)
    assert names(CHILD) == frozenset({"first", "second"})
    assert names("workflow: [") is None
    # The cache holds one text: the first is read again, with the same answer.
    assert names(CHILD) == frozenset({"first", "second"})


def _log(
    store: MemoryStore, execution_id: str, events: list[tuple[str, str, dict[str, Any]]]
) -> None:
    record = ExecutionRecord(execution_id, "child", None, CHILD)
    logged = [
        Event(seq, kind, execution_id, 0.0, step, payload)
        for seq, (kind, step, payload) in enumerate(events, start=1)
    ]
    store.create_execution(record, Append(execution_id=execution_id, expected_seq=0, events=logged))


def test_step_result_is_the_last_ok_finish_of_the_step() -> None:
    store = MemoryStore()
    _log(
        store,
        "c1",
        [
            (EventType.STEP_FINISHED, "first", {"status": "ok", "result": {"n": 1}}),
            (EventType.STEP_FINISHED, "second", {"status": "failed", "error": "x"}),
            (EventType.STEP_FINISHED, "first", {"status": "ok", "result": {"n": 2}}),
        ],
    )
    assert step_result(store, "c1", "first") == (True, {"n": 2})
    assert step_result(store, "c1", "second") == (False, None)
    assert step_result(store, "c1", "third") == (False, None)


def test_step_result_reads_a_long_log_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    from noetl.tools import child_steps

    monkeypatch.setattr(child_steps, "EVENT_CHUNK", 2)
    store = MemoryStore()
    events = [(EventType.STEP_STARTED, "first", {}) for _ in range(5)]
    events.append((EventType.STEP_FINISHED, "first", {"status": "ok", "result": 7}))
    _log(store, "c2", events)
    assert step_result(store, "c2", "first") == (True, 7)


def test_return_step_is_read_in_both_dialects() -> None:
    upstream = load_playbook_text(
        UPSTREAM_HEAD
        + textwrap.dedent("""
            workflow:
              - step: start
                tool:
                  kind: playbook
                  path: tests/child
                  return_step: end
                  input: {n: 1}
            """),
        "parent.yaml",
    )
    assert upstream.errors == [], [d.format() for d in upstream.errors]
    assert upstream.playbook is not None and upstream.playbook.dialect == "upstream"
    tool = upstream.playbook.step("start").tool
    assert tool is not None and tool.spec["return_step"] == "end"
    native = load_playbook_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: p}\nworkflow:\n"
        "  - step: a\n    tool: {kind: playbook, path: x, return_step: b}\n",
        "native.yaml",
    )
    assert native.ok and native.playbook is not None
    assert native.playbook.dialect != "upstream"  # return_step alone does not mark a file
    empty = load_playbook_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: p}\nworkflow:\n"
        "  - step: a\n    tool: {kind: playbook, path: x, return_step: ''}\n",
        "empty.yaml",
    )
    assert not empty.ok


def test_upstream_templates_see_the_execution_as_job() -> None:
    text = UPSTREAM_HEAD + textwrap.dedent("""
        workflow:
          - step: start
            tool:
              kind: python
              input:
                parent: "{{ job.execution_id }}"
                uuid: "{{ job.uuid }}"
              code: |
                result = {"parent": parent, "uuid": uuid}
        """)
    seen: list[dict[str, Any]] = []

    def record(task: Task) -> Any:
        seen.append(dict(task.args))
        return task.args

    harness = Harness.from_text(text, handlers={"start": record})
    harness.start()
    harness.run()
    execution_id = harness.state.execution_id
    assert seen == [{"parent": execution_id, "uuid": execution_id}]


def test_find_file_tries_candidates_then_metadata_paths_within_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from noetl.tools import child_steps

    (tmp_path / "a.yaml").write_text("metadata: {name: a, path: other}\n")
    (tmp_path / "b.yaml").write_text("metadata: {name: b, path: wanted/one}\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "c.yaml").write_text("metadata: {name: c, path: hidden/one}\n")
    (tmp_path / "wanted").mkdir()
    (tmp_path / "wanted" / "two.yml").write_text("metadata: {name: two}\n")
    assert find_file("wanted/two", tmp_path)[0] == tmp_path / "wanted" / "two.yml"
    file, tried = find_file("wanted/one", tmp_path)
    assert file == tmp_path / "b.yaml"
    assert tried[-1] == "a playbook with metadata.path 'wanted/one'"
    assert find_file("hidden/one", tmp_path)[0] is None
    monkeypatch.setattr(child_steps, "MAX_SCANNED_FILES", 1)  # a.yaml only
    assert find_file("wanted/one", tmp_path)[0] is None
    with pytest.raises(PathRefusedError):
        find_file("../elsewhere", tmp_path)


class _FlakyLogStore(MemoryStore):
    """A store whose event logs cannot be read (a transient failure)."""

    def load_events(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        raise StoreUnavailableError("the database is busy", retryable=True)


class _Launcher:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def launch(self, *args: Any, **kwargs: Any) -> bool:  # pragma: no cover - not called
        raise AssertionError("the child exists: nothing is started")

    def cancel(self, execution_id: str) -> None:  # pragma: no cover - not called
        raise AssertionError("nothing is canceled")

    def stopping(self) -> bool:
        return False


def test_a_return_step_that_cannot_be_read_yet_is_a_retryable_failure() -> None:
    store = _FlakyLogStore()
    key = "parent-1:call"
    child = ExecutionRecord(child_execution_id(key), "child", None, CHILD, ExecutionStatus.OK)
    store.create_execution(child)
    task = Task(
        "t1", "parent-1", "call", "playbook", {"path": "x", "return_step": "first"}, {}, {}, key
    )
    outcome = PlaybookTool(_Launcher(store)).run(task)
    assert not outcome.ok and outcome.retryable
    assert outcome.error is not None and "reading step 'first' of child execution" in outcome.error
