"""The result store (`store.results`) of every Store adapter: a whole result in, the same
value out, by an unguessable reference."""

from __future__ import annotations

from noetl.store.base import Store
from noetl.store.managers.results import REF_PREFIX, is_ref

BIG = {
    "status": "ok",
    "count": 3,
    "items": [{"id": i, "data": "x" * 1000, "nul": "a\x00b", "uni": "é✓"} for i in range(3)],
}


def test_a_result_is_kept_and_read_back_by_its_reference(store: Store) -> None:
    stored = store.results.put("ex-1", "start", BIG)
    assert stored.ref.startswith(REF_PREFIX) and is_ref(stored.ref)
    assert stored.bytes > 3000 and stored.execution_id == "ex-1" and stored.step == "start"
    got = store.results.get(stored.ref)
    assert got is not None
    assert got.value == BIG  # NUL and non-ASCII text survive the round trip
    assert (got.ref, got.execution_id, got.step, got.bytes) == (
        stored.ref,
        "ex-1",
        "start",
        stored.bytes,
    )


def test_references_are_distinct_and_unknown_ones_read_as_none(store: Store) -> None:
    first = store.results.put("ex-1", "a", [1, 2])
    second = store.results.put("ex-1", "a", [1, 2])
    assert first.ref != second.ref
    assert store.results.get(REF_PREFIX + "0" * 32) is None
    assert store.results.get("not a reference") is None
    assert store.results.get("") is None


def test_results_are_counted_per_execution(store: Store) -> None:
    store.results.put("ex-1", "a", {"x": 1})
    store.results.put("ex-1", None, "text")
    store.results.put("ex-2", "b", None)
    count, size = store.results.count("ex-1")
    assert count == 2 and size == len('{"x":1}') + len('"text"')
    assert store.results.count("ex-2") == (1, 4)
    assert store.results.count("ex-3") == (0, 0)
