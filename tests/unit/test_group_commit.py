"""GroupCommit: the items submitted while a call runs go together in the next call."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from noetl.decision.group_commit import GroupCommit


class Gate:
    """A call that records its batches and, for its first call, waits to be let go."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        if len(self.batches) == 1:
            self.entered.set()
            assert self.release.wait(5)
        return [item * 10 for item in items]


def until_waiting(group: GroupCommit[int, int], count: int) -> None:
    """Until `count` items wait for the next call (5 s at most)."""
    deadline = time.monotonic() + 5
    while True:
        with group._lock:
            if len(group._queue) == count:
                return
        assert time.monotonic() < deadline, "the items never queued"
        time.sleep(0.001)


def test_a_lone_submit_is_called_at_once() -> None:
    calls: list[list[int]] = []

    def call(items: list[int]) -> list[int]:
        calls.append(items)
        return [item + 1 for item in items]

    group = GroupCommit(call)

    assert group.submit(1) == 2
    assert group.submit(5) == 6
    assert calls == [[1], [5]]


def submitted_during_a_call(group: GroupCommit[int, int], gate: Gate, count: int) -> list[Any]:
    """Submit 0, let its call start, submit 1 to `count` meanwhile, then let it end: the
    outcomes (an answer, or what was raised), in order."""
    with ThreadPoolExecutor(max_workers=count + 1) as pool:
        first = pool.submit(group.submit, 0)
        assert gate.entered.wait(5)
        later = [pool.submit(group.submit, n) for n in range(1, count + 1)]
        until_waiting(group, count)
        gate.release.set()
        futures = [first, *later]
        return [f.exception(5) or f.result(5) for f in futures]


def test_items_submitted_during_a_call_go_together_in_the_next() -> None:
    gate = Gate()
    group: GroupCommit[int, int] = GroupCommit(gate)

    answers = submitted_during_a_call(group, gate, 5)

    assert answers == [0, 10, 20, 30, 40, 50]  # each thread its own item's answer
    assert gate.batches[0] == [0]
    assert sorted(gate.batches[1]) == [1, 2, 3, 4, 5]
    assert group.calls == 2


def test_a_call_takes_at_most_limit_items() -> None:
    gate = Gate()
    group: GroupCommit[int, int] = GroupCommit(gate, limit=2)

    answers = submitted_during_a_call(group, gate, 5)

    assert answers == [0, 10, 20, 30, 40, 50]
    assert [len(batch) for batch in gate.batches] == [1, 2, 2, 1]


def test_submit_many_answers_in_order_over_several_calls() -> None:
    group: GroupCommit[int, int] = GroupCommit(lambda items: [-i for i in items], limit=2)

    assert group.submit_many([1, 2, 3, 4, 5]) == [-1, -2, -3, -4, -5]
    assert group.calls == 3
    assert group.submit_many([]) == []


def test_what_a_call_raises_is_raised_in_every_thread_it_took_and_the_next_call_goes_on() -> None:
    gate = Gate()

    def call(items: list[int]) -> list[int]:
        result = gate(items)
        if len(gate.batches) == 2:
            raise RuntimeError("the database went away")
        return result

    group: GroupCommit[int, int] = GroupCommit(call)

    first, *raised = submitted_during_a_call(group, gate, 2)

    assert first == 0
    assert [str(exc) for exc in raised] == ["the database went away"] * 2
    assert all(isinstance(exc, RuntimeError) for exc in raised)
    assert raised[0] is not raised[1]  # an object of its own to each thread
    assert group.submit(7) == 70  # the group is not stuck


def test_a_call_with_the_wrong_number_of_answers_is_an_error() -> None:
    group: GroupCommit[int, int] = GroupCommit(lambda items: [])

    with pytest.raises(RuntimeError, match="0 answers for 1 items"):
        group.submit(1)


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="limit"):
        GroupCommit(lambda items: items, limit=0)


def test_many_threads_each_get_their_own_answers_and_none_is_left_waiting() -> None:
    """16 threads submitting one item or several at a time, against a call that takes a
    moment: every answer is its item's, and every thread returns (no lost wake-up)."""
    calls: list[int] = []

    def call(items: list[int]) -> list[int]:
        calls.append(len(items))
        time.sleep(0.0005)
        return [item * 3 for item in items]

    group: GroupCommit[int, int] = GroupCommit(call, limit=5)

    def submitter(base: int) -> bool:
        for n in range(60):
            item = base * 1000 + n
            if n % 3 == 0:
                several = [item, item + 500, item + 700]
                assert group.submit_many(several) == [i * 3 for i in several]
            else:
                assert group.submit(item) == item * 3
        return True

    finished: list[int] = []
    threads = [
        threading.Thread(target=lambda b=base: submitter(b) and finished.append(b), daemon=True)
        for base in range(16)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    for thread in threads:  # a thread never woken would hang here: daemons, joined with a limit
        thread.join(max(deadline - time.monotonic(), 0))
    assert sorted(finished) == list(range(16)), "some threads were never answered"
    assert sum(calls) == 16 * (40 + 20 * 3)
    assert max(calls) <= 5
    assert len(calls) < 16 * 60  # grouped


class Interrupt(BaseException):
    """As KeyboardInterrupt: not an error of the items, it ends the calling thread."""


def test_a_leader_interrupted_hands_the_next_call_on_and_leaves_with_its_items() -> None:
    """The leader's first call (item 0; its item 1 still queued) is interrupted while
    another thread's item waits: that thread makes the next call, for its own item only."""
    entered, release = threading.Event(), threading.Event()
    batches: list[list[int]] = []

    def call(items: list[int]) -> list[int]:
        batches.append(list(items))
        if len(batches) == 1:
            entered.set()
            assert release.wait(5)
            raise Interrupt
        return [item * 10 for item in items]

    group: GroupCommit[int, int] = GroupCommit(call, limit=1)
    outcomes: dict[str, object] = {}

    def leader() -> None:
        try:
            group.submit_many([0, 1])
        except Interrupt:
            outcomes["leader"] = "interrupted"

    def other() -> None:
        outcomes["other"] = group.submit(2)

    threads = [threading.Thread(target=leader, daemon=True)]
    threads[0].start()
    assert entered.wait(5)
    threads.append(threading.Thread(target=other, daemon=True))
    threads[1].start()
    until_waiting(group, 2)  # the leader's item 1, and item 2
    release.set()
    for thread in threads:  # a thread never woken would hang: daemons, joined with a limit
        thread.join(5)
    assert outcomes == {"leader": "interrupted", "other": 20}
    assert batches == [[0], [2]]
