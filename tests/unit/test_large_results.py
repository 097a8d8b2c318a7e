"""`result.select` and the `artifact` tool: the whole result in the result store, the
selection reported, the whole read back by its reference."""

from __future__ import annotations

from typing import Any

import pytest

from noetl.core import Outcome, Task
from noetl.core.errors import StoreUnavailableError
from noetl.dsl.model import Result
from noetl.store import MemoryStore
from noetl.store.records import StoredResult
from noetl.tools.artifact import ArtifactTool
from noetl.worker.selection import select_result

BIG = {"status": "ok", "count": 2, "items": [{"id": 1, "data": "x" * 5000}, {"id": 2}]}


def task(select: tuple[str, ...] = ("status", "count"), **spec: Any) -> Task:
    return Task(
        task_id="ex-1.start",
        execution_id="ex-1",
        step="start",
        kind="python",
        spec=spec,
        args={},
        context={},
        key="ex-1:start",
        select=select,
    )


def test_the_selection_is_reported_and_the_whole_kept_under_its_reference() -> None:
    store = MemoryStore()
    outcome = select_result(Outcome("ex-1.start", ok=True, this=BIG), task(), store.results)
    assert outcome.ok
    this = outcome.this
    assert {k: this[k] for k in ("status", "count")} == {"status": "ok", "count": 2}
    assert "items" not in this
    assert this["_store"] == "db" and this["_bytes"] > 5000
    kept = store.results.get(this["_ref"])
    assert kept is not None and kept.value == BIG and kept.step == "start"


def test_fields_the_result_lacks_are_left_out_and_a_list_keeps_only_the_reference() -> None:
    store = MemoryStore()
    missing = select_result(
        Outcome("t", ok=True, this={"a": 1}), task(("a", "b")), store.results
    ).this
    assert set(missing) == {"a", "_ref", "_store", "_bytes"}
    listed = select_result(Outcome("t", ok=True, this=[1, 2, 3]), task(), store.results).this
    assert set(listed) == {"_ref", "_store", "_bytes"}
    kept = store.results.get(listed["_ref"])
    assert kept is not None and kept.value == [1, 2, 3]


def test_without_select_or_after_a_failure_nothing_is_kept() -> None:
    store = MemoryStore()
    plain = Outcome("t", ok=True, this=BIG)
    assert select_result(plain, task(()), store.results) is plain
    failed = Outcome("t", ok=False, error="boom")
    assert select_result(failed, task(), store.results) is failed
    assert store.results.count("ex-1") == (0, 0)


class _Down:
    def put(self, execution_id: str, step: str | None, value: Any) -> StoredResult:
        raise StoreUnavailableError("postgresql://db:5432/noetl: connection refused")

    def get(self, ref: str) -> StoredResult | None:
        return None

    def count(self, execution_id: str) -> tuple[int, int]:
        return (0, 0)


def test_a_result_store_that_cannot_be_written_fails_the_task_retryably() -> None:
    outcome = select_result(Outcome("t", ok=True, this=BIG), task(), _Down())
    assert not outcome.ok and outcome.retryable
    assert "keeping the result failed" in (outcome.error or "")


def test_the_artifact_tool_reads_the_whole_result_back() -> None:
    store = MemoryStore()
    ref = select_result(Outcome("t", ok=True, this=BIG), task(), store.results).this["_ref"]
    tool = ArtifactTool(store.results)
    by_spec = tool.run(task((), action="get", ref=ref))
    assert by_spec.ok and by_spec.this == BIG
    upstream = tool.run(Task(**{**_fields(task(())), "args": {"result_ref": ref}}))
    assert upstream.ok and upstream.this == BIG


@pytest.mark.parametrize(
    ("spec", "args", "error"),
    [
        ({"ref": "noetl://results/" + "0" * 32}, {}, "no result is kept under the reference"),
        ({}, {}, "no reference given"),
        ({"action": "put", "ref": "x"}, {}, "action 'put' is not supported"),
    ],
)
def test_the_artifact_tool_fails_clearly(
    spec: dict[str, Any], args: dict[str, Any], error: str
) -> None:
    outcome = ArtifactTool(MemoryStore().results).run(
        Task(**{**_fields(task(())), "spec": spec, "args": args})
    )
    assert not outcome.ok and not outcome.retryable
    assert error in (outcome.error or "")


def test_select_is_a_list_of_field_names_in_the_result_block() -> None:
    assert Result.model_validate({"select": ["a", "b"]}).select == ["a", "b"]
    with pytest.raises(ValueError, match="select"):
        Result.model_validate({"select": "a"})


def _fields(t: Task) -> dict[str, Any]:
    return {
        "task_id": t.task_id,
        "execution_id": t.execution_id,
        "step": t.step,
        "kind": "artifact",
        "spec": t.spec,
        "args": t.args,
        "context": t.context,
        "key": t.key,
    }
