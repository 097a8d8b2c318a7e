"""The spill of large results (noetl.worker.selection) on the real stores, SQLite and
PostgreSQL: a result over the inline limit is kept whole in the result store and
reported as a small envelope; a small one, a failed one and a selected one are not."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noetl.core import Outcome, Task
from noetl.store import SqliteStore, Store
from noetl.tools.artifact import ArtifactTool
from noetl.worker.pipeline import PipelineTool
from noetl.worker.selection import ENVELOPE_BYTES, FIELD_BYTES, select_result, spill_result
from noetl.worker.tools import NoopTool, ToolRegistry

LIMIT = 4096
ENVELOPE_KEYS = ["_ref", "_store", "_bytes", "_spilled"]


def task(select: tuple[str, ...] = (), kind: str = "python") -> Task:
    return Task(
        task_id="ex-1.fetch",
        execution_id="ex-1",
        step="fetch",
        kind=kind,
        spec={},
        args={},
        context={},
        key="ex-1:fetch",
        select=select,
    )


def spill(store: Store, this: Any, *, t: Task | None = None, ok: bool = True) -> Outcome:
    outcome = Outcome("ex-1.fetch", ok=ok, this=this, error=None if ok else "boom")
    return spill_result(outcome, t or task(), store.results, LIMIT)


def size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")))


def whole(store: Store, ref: str) -> Any:
    kept = store.results.get(ref)
    assert kept is not None
    return kept.value


def test_a_large_map_keeps_its_small_fields_in_order_and_the_whole_in_the_store(
    store: Store,
) -> None:
    headers = {"content-type": "application/json", "x-page": "3"}
    result = {
        "status": "ok",
        "rows": [{"id": i, "name": "n" * 50} for i in range(200)],
        "count": 200,
        "blob": "b" * (FIELD_BYTES + 1),
        "headers": headers,
        "next": None,
    }
    outcome = spill(store, result)
    assert outcome.ok
    this = outcome.this
    assert list(this) == ["status", "count", "headers", "next", *ENVELOPE_KEYS]
    assert (this["status"], this["count"], this["headers"]) == ("ok", 200, headers)
    assert this["_store"] == "db" and this["_spilled"] is True
    assert this["_bytes"] == size(result)
    assert whole(store, this["_ref"]) == result
    assert store.results.count("ex-1")[0] == 1


def test_the_kept_fields_take_at_most_16_kib_in_all(store: Store) -> None:
    # each entry `"kNN":"x...x",` takes 509 bytes: 32 fit in 16 KiB, the rest does not,
    # but for a small field after them that still fits
    result: dict[str, Any] = {f"k{i:02}": "x" * 500 for i in range(40)}
    result["status"] = "ok"
    this = spill(store, result).this
    kept = [key for key in this if not key.startswith("_")]
    assert kept == [f"k{i:02}" for i in range(32)] + ["status"]
    assert size({k: this[k] for k in kept}) <= ENVELOPE_BYTES
    assert whole(store, this["_ref"]) == result


def test_a_large_list_reports_its_length(store: Store) -> None:
    result = [{"id": i, "pad": "p" * 100} for i in range(100)]
    this = spill(store, result).this
    assert this == {
        "_ref": this["_ref"],
        "_store": "db",
        "_bytes": size(result),
        "_spilled": True,
        "_count": 100,
    }
    assert whole(store, this["_ref"]) == result


def test_a_large_string_is_spilled_and_a_scalar_never(store: Store) -> None:
    text = "é" * 1000  # 6 bytes of JSON each: over the limit though short
    this = spill(store, text).this
    assert list(this) == ENVELOPE_KEYS and this["_bytes"] == size(text)
    assert whole(store, this["_ref"]) == text
    for small in (1, 2.5, True, None, "a" * 100):
        outcome = Outcome("t", ok=True, this=small)
        assert spill_result(outcome, task(), store.results, LIMIT) is outcome


def test_a_result_exactly_at_the_limit_stays_inline(store: Store) -> None:
    at = {"a": "x" * (LIMIT - 8)}  # {"a":"..."}: 8 bytes and the string
    assert size(at) == LIMIT
    outcome = Outcome("t", ok=True, this=at)
    assert spill_result(outcome, task(), store.results, LIMIT) is outcome
    over = {"a": "x" * (LIMIT - 7)}
    assert spill(store, over).this["_bytes"] == LIMIT + 1
    assert store.results.count("ex-1")[0] == 1


def test_select_wins_and_a_failure_is_never_spilled(store: Store) -> None:
    result = {"status": "ok", "rows": ["r" * 100] * 100}
    registry = ToolRegistry([Echo(result)], results=store.results, result_inline_bytes=LIMIT)
    selected = registry.run(task(select=("rows",), kind="echo")).this
    assert set(selected) == {"rows", "_ref", "_store", "_bytes"}  # the selection, whole
    failed = Outcome("t", ok=False, this=result, error="boom")
    assert spill_result(failed, task(), store.results, LIMIT) is failed
    assert select_result(failed, task(select=("rows",)), store.results) is failed
    assert store.results.count("ex-1")[0] == 1  # the selection's alone


def test_a_spill_that_cannot_be_written_fails_the_task_retryably(
    store: Store, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if isinstance(store, SqliteStore):
        with sqlite3.connect(tmp_path / "noetl.db") as conn:
            conn.execute("DROP TABLE result_store")
    else:
        with psycopg.connect(request.getfixturevalue("pg_database"), autocommit=True) as conn:
            conn.execute("DROP TABLE result_store")
    outcome = spill(store, {"rows": ["r" * 100] * 100})
    assert not outcome.ok and outcome.retryable
    assert outcome.error_type == "StoreUnavailableError"
    assert "keeping a large result" in (outcome.error or "")


class Echo:
    """Returns the same result for every task."""

    uses_credentials = False

    def __init__(self, result: Any, kind: str = "echo") -> None:
        self.kind = kind
        self.result = result

    def run(self, task: Task) -> Outcome:
        return Outcome(task.task_id, ok=True, this=self.result)


def test_the_registry_spills_a_task_s_own_result_only(store: Store) -> None:
    big = {"status": "ok", "rows": ["r" * 100] * 100}
    registry = ToolRegistry(
        [Echo(big), ArtifactTool(store.results)],
        results=store.results,
        result_inline_bytes=LIMIT,
    )
    spilled = registry.run(task(kind="echo")).this
    assert spilled["_spilled"] is True and "rows" not in spilled
    # a pipeline's task (`call`) is not spilled; nor what the artifact tool reads back
    assert registry.call(task(kind="echo")).this == big
    read = Task(**{**_fields(task(kind="artifact")), "spec": {"ref": spilled["_ref"]}})
    assert registry.run(read).this == big
    # small results pass as they are; no limit, or no result store: nothing is spilled
    assert registry.run(task(kind="echo")).this["_bytes"] == size(big)
    registry.result_inline_bytes = None
    assert registry.run(task(kind="echo")).this == big
    assert ToolRegistry([Echo(big)], result_inline_bytes=LIMIT).run(task(kind="echo")).this == big
    small = ToolRegistry([Echo({"a": 1})], results=store.results, result_inline_bytes=LIMIT)
    assert small.run(task(kind="echo")).this == {"a": 1}
    assert store.results.count("ex-1")[0] == 2


def _fields(t: Task) -> dict[str, Any]:
    return {name: getattr(t, name) for name in Task.__dataclass_fields__}


def test_a_pipeline_s_result_is_spilled_not_its_tasks(store: Store) -> None:
    big = {"status": "ok", "rows": ["r" * 100] * 100}
    registry = ToolRegistry([NoopTool()], results=store.results, result_inline_bytes=LIMIT)
    registry.register(PipelineTool(registry))

    def pipeline(*tasks: dict[str, Any]) -> Task:
        spec = {"tasks": list(tasks), "render_code": True}
        return Task(**{**_fields(task(kind="pipeline")), "spec": spec})

    fetch = {"name": "fetch", "tool": {"kind": "noop", "args": big}}
    count = {"name": "count", "tool": {"kind": "noop", "args": {"n": "{{ fetch.rows | length }}"}}}
    # the second task reads the first one's whole result
    assert registry.run(pipeline(fetch, count)).this == {"n": 100}
    assert store.results.count("ex-1")[0] == 0
    # the pipeline's own result (its last task's) is spilled
    this = registry.run(pipeline({"name": "first", "tool": {"kind": "noop"}}, fetch)).this
    assert this["_spilled"] is True and this["status"] == "ok" and "rows" not in this
    assert whole(store, this["_ref"]) == big
