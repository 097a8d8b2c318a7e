"""The checkpoint store (`store.checkpoints`) of every Store adapter: one checkpoint per
task, replaced by the same or a later attempt, never by an earlier one."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from noetl.store.base import Store
from noetl.store.managers.checkpoints import MAX_CHECKPOINT_BYTES
from tests.helpers.clock import StoreClock

PROGRESS = {
    "done": [1, 2, 3],
    "cursor": {"page": 7, "after": "id-42", "nested": [{"a": None, "b": [True, 1.5]}]},
    "text": "é✓ 日本語 😀",
    "nul": "a\x00b",
    "key\x00with nul": "\x00",
}


def test_a_checkpoint_is_kept_and_read_back(store: Store, clock: StoreClock) -> None:
    before = clock()
    assert store.checkpoints.save("t-1", "ex-1", 1, PROGRESS) is True
    after = clock()

    got = store.checkpoints.load("t-1")
    assert got is not None
    assert (got.task_id, got.execution_id, got.attempt) == ("t-1", "ex-1", 1)
    assert got.value == PROGRESS  # nested JSON, non-ASCII text and NUL survive
    slack = 1.0 if clock.real else 0.0  # PostgreSQL times it by the database's now()
    assert before - slack <= got.updated_at <= after + slack


@pytest.mark.parametrize("value", [None, 0, "", [], {}, "plain", [None, [None]]])
def test_any_json_value_round_trips(store: Store, value: Any) -> None:
    assert store.checkpoints.save("t-1", "ex-1", 1, value) is True
    got = store.checkpoints.load("t-1")
    assert got is not None and got.value == value


def test_the_same_attempt_replaces_its_checkpoint(store: Store, clock: StoreClock) -> None:
    assert store.checkpoints.save("t-1", "ex-1", 2, {"page": 1}) is True
    first = store.checkpoints.load("t-1")
    clock.advance(0.05)
    assert store.checkpoints.save("t-1", "ex-1", 2, {"page": 2}) is True

    got = store.checkpoints.load("t-1")
    assert got is not None and first is not None
    assert (got.attempt, got.value) == (2, {"page": 2})
    assert got.updated_at > first.updated_at


def test_a_later_attempt_replaces_the_checkpoint(store: Store) -> None:
    assert store.checkpoints.save("t-1", "ex-1", 1, {"page": 5}) is True
    assert store.checkpoints.save("t-1", "ex-1", 3, {"page": 6}) is True

    got = store.checkpoints.load("t-1")
    assert got is not None and (got.attempt, got.value) == (3, {"page": 6})


def test_an_earlier_attempt_never_replaces_a_later_ones_checkpoint(store: Store) -> None:
    assert store.checkpoints.save("t-1", "ex-1", 3, {"page": 9}) is True
    kept = store.checkpoints.load("t-1")

    # A stale worker, still running attempt 2 after attempt 3 began, saves its progress.
    assert store.checkpoints.save("t-1", "ex-1", 2, {"page": 4}) is False
    assert store.checkpoints.save("t-1", "ex-other", 1, {"page": 1}) is False

    assert store.checkpoints.load("t-1") == kept  # value, attempt and time unchanged
    assert store.checkpoints.save("t-1", "ex-1", 3, {"page": 10}) is True


def test_drop_forgets_a_checkpoint(store: Store) -> None:
    store.checkpoints.save("t-1", "ex-1", 4, {"page": 3})
    store.checkpoints.drop("t-1")
    assert store.checkpoints.load("t-1") is None
    store.checkpoints.drop("t-1")  # nothing to drop: no error
    store.checkpoints.drop("never-saved")

    # Nothing is kept, so any attempt may start again.
    assert store.checkpoints.save("t-1", "ex-1", 1, {"page": 0}) is True
    got = store.checkpoints.load("t-1")
    assert got is not None and (got.attempt, got.value) == (1, {"page": 0})


def test_an_unknown_task_has_no_checkpoint(store: Store) -> None:
    assert store.checkpoints.load("nope") is None
    assert store.checkpoints.load("") is None


def test_tasks_keep_their_own_checkpoints(store: Store) -> None:
    assert store.checkpoints.save("t-1", "ex-1", 5, {"of": "t-1"}) is True
    assert store.checkpoints.save("t-2", "ex-1", 1, {"of": "t-2"}) is True  # not stale
    store.checkpoints.drop("t-1")

    one, two = store.checkpoints.load("t-1"), store.checkpoints.load("t-2")
    assert one is None
    assert two is not None and (two.task_id, two.attempt, two.value) == ("t-2", 1, {"of": "t-2"})


def test_a_checkpoint_over_the_limit_is_refused(store: Store) -> None:
    assert MAX_CHECKPOINT_BYTES == 16 * 1024 * 1024
    store.checkpoints.save("t-1", "ex-1", 1, {"page": 1})
    at_limit = "x" * (MAX_CHECKPOINT_BYTES - 2)  # its JSON, quotes included, is the limit

    with pytest.raises(ValueError, match=rf"'t-1'.*{MAX_CHECKPOINT_BYTES + 1} bytes"):
        store.checkpoints.save("t-1", "ex-1", 2, at_limit + "x")

    got = store.checkpoints.load("t-1")
    assert got is not None and (got.attempt, got.value) == (1, {"page": 1})
    assert store.checkpoints.save("t-1", "ex-1", 2, at_limit) is True
    got = store.checkpoints.load("t-1")
    assert got is not None and got.attempt == 2 and got.value == at_limit


def test_racing_attempts_leave_the_latest_attempts_last_checkpoint(store: Store) -> None:
    saves = 25

    def run(attempt: int) -> None:
        for part in range(saves):
            store.checkpoints.save("t-1", "ex-1", attempt, {"attempt": attempt, "part": part})

    threads = [threading.Thread(target=run, args=(attempt,)) for attempt in (1, 2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    got = store.checkpoints.load("t-1")
    assert got is not None
    assert (got.attempt, got.value) == (4, {"attempt": 4, "part": saves - 1})
