"""A loop's per-item results: compact, and the same answers as the dictionaries they
replaced."""

from __future__ import annotations

import sys

from noetl.engine.runs import ItemResults


def test_items_report_ok_failed_or_unfinished() -> None:
    results = ItemResults()
    results.record(0, ok=True, out={"v": 1})
    results.record(3, ok=False)
    assert [results.ok(i) for i in range(5)] == [True, None, None, False, None]
    assert results.ok(10_000) is None


def test_outputs_fill_unfinished_and_failed_items_with_none() -> None:
    results = ItemResults()
    results.record(2, ok=True, out="c")
    results.record(0, ok=True, out="a")
    results.record(1, ok=False)
    assert results.outputs(4) == ["a", None, "c", None]
    assert results.outputs(2) == ["a", None]


def test_collected_keeps_successes_in_order_with_their_keys() -> None:
    results = ItemResults()
    results.record(1, ok=True, out=20, collect_key="b")
    results.record(0, ok=True, out=10)
    results.record(2, ok=False)
    results.record(3, ok=True, out=None)  # a success whose output is None still counts
    assert results.collected(4) == [(None, 10), ("b", 20), (None, None)]
    assert results.collected(2) == [(None, 10), ("b", 20)]


def test_forget_makes_an_item_unfinished_and_says_what_it_was() -> None:
    results = ItemResults()
    results.record(0, ok=False)
    results.record(1, ok=True, out=1, collect_key="k")
    assert results.forget(0) is False
    assert results.forget(1) is True
    assert results.forget(2) is None
    assert results.ok(0) is None and results.ok(1) is None
    assert results.collected(2) == []


def test_equal_when_the_same_items_finished_the_same_way() -> None:
    one, two = ItemResults(), ItemResults()
    for results in (one, two):
        results.record(0, ok=True, out=[1])
    assert one == two
    two.record(1, ok=False)
    assert one != two


def test_a_million_items_cost_little_beyond_their_outputs() -> None:
    results = ItemResults()
    for i in range(1_000_000):
        results.record(i, ok=True, out=None)
    status, outs = results._status, results._outs
    # A byte and a pointer per item (dictionaries by index took about 100 bytes).
    assert sys.getsizeof(status) + sys.getsizeof(outs) < 12 * 1_000_000
