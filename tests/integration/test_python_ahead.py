"""Several python tasks sent to one child at once (`PythonPool.run_ahead`), each with its
own timeout, crash, cancel, printed lines and duration; and the embedded runtime's lane
that uses it."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Outcome, Task
from noetl.dsl import load_playbook_text
from noetl.runtime.local import embedded_runtime
from noetl.worker.python_pool import PythonPool
from tests.helpers.python_loops import count_batches, python_loop

ROOT = Path(__file__).resolve().parents[2]


def task(n: int, source: str, *, timeout_ms: int | None = None, **args: Any) -> Task:
    return Task(
        task_id=f"t{n}",
        execution_id="e1",
        step="step",
        kind="python",
        spec={"code": source},
        args=args,
        context={},
        key=f"e1:step:{n}",
        index=n,
        timeout_ms=timeout_ms,
    )


DOUBLE = "def main(context, args):\n    return args['x'] * 2\n"
SLEEP = "import time\n\ndef main(context, args):\n    time.sleep(args['s'])\n    return args['s']\n"
EXIT = "import os\n\ndef main():\n    os._exit(3)\n"
PRINT = "def main(context, args):\n    print('line', args['x'])\n    return args['x']\n"


@pytest.fixture
def solo() -> Iterator[PythonPool]:
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT))
        with PythonPool(processes=1) as single:
            yield single


def test_a_batch_runs_in_one_round_trip_and_each_run_takes_its_reply(solo: PythonPool) -> None:
    batch = [task(n, DOUBLE, x=n) for n in range(5)]

    assert solo.run_ahead(batch) == 5
    solo.close()  # no child left: the replies must be the ones run ahead

    outcomes = [solo.run(t) for t in batch]
    assert [o.this for o in outcomes] == [0, 2, 4, 6, 8]
    assert all(o.ok for o in outcomes)


def test_each_task_keeps_its_own_timeout_and_the_rest_run_again(solo: PythonPool) -> None:
    first, slow, last = (
        task(1, SLEEP, s=0.3),
        task(2, SLEEP, s=30, timeout_ms=300),
        task(3, DOUBLE, x=3),
    )
    started = time.monotonic()

    assert solo.run_ahead([first, slow, last]) == 2  # the last never started
    assert time.monotonic() - started < 5

    assert solo.run(first).this == 0.3
    timed_out = solo.run(slow)
    assert not timed_out.ok
    assert timed_out.error_type == "TimeoutError"
    assert timed_out.retryable
    # its own 300 ms, counted from its own start (not the batch's)
    assert 250 <= (timed_out.duration_ms or 0) < 2000
    assert solo.run(last).this == 6  # run on its own, by a fresh child


def test_a_crash_fails_the_task_running_and_the_rest_run_again(solo: PythonPool) -> None:
    batch = [task(1, DOUBLE, x=1), task(2, EXIT), task(3, DOUBLE, x=3)]

    assert solo.run_ahead(batch) == 2

    assert solo.run(batch[0]).this == 2
    crashed = solo.run(batch[1])
    assert crashed.error_type == "ProcessError"
    assert "exited with code 3" in (crashed.error or "")
    assert solo.run(batch[2]).this == 6


def test_canceling_a_later_task_interrupts_the_batch_without_failing_the_others(
    solo: PythonPool,
) -> None:
    running, waiting = task(1, SLEEP, s=30), task(2, DOUBLE, x=2)
    done: list[int] = []
    runner = threading.Thread(target=lambda: done.append(solo.run_ahead([running, waiting])))
    runner.start()
    deadline = time.monotonic() + 5
    while not solo.cancel("t2"):  # the batch is out once its tasks have a child
        assert time.monotonic() < deadline, "the batch never started"
        time.sleep(0.01)
    runner.join(timeout=5)

    assert done == [0]  # nothing has a reply: the innocent task runs again on its own
    assert solo.run(task(1, SLEEP, s=0.01)).ok
    assert solo.run(waiting).this == 4


def test_canceling_the_running_task_of_a_batch_cancels_it(solo: PythonPool) -> None:
    running, waiting = task(1, SLEEP, s=30), task(2, DOUBLE, x=2)
    runner = threading.Thread(target=lambda: solo.run_ahead([running, waiting]))
    runner.start()
    deadline = time.monotonic() + 5
    while not solo.cancel("t1"):
        assert time.monotonic() < deadline, "the batch never started"
        time.sleep(0.01)
    runner.join(timeout=5)

    canceled = solo.run(running)
    assert canceled.error_type == "CancelError"
    assert solo.run(waiting).this == 4


def test_printed_lines_and_durations_are_each_tasks_own(solo: PythonPool) -> None:
    batch = [task(1, SLEEP, s=0.2), task(2, PRINT, x=7), task(3, SLEEP, s=0.2)]

    assert solo.run_ahead(batch) == 3

    outcomes: list[Outcome] = [solo.run(t) for t in batch]
    assert outcomes[1].stdout == "line 7\n"
    assert outcomes[0].stdout == outcomes[2].stdout == ""
    for slow in (outcomes[0], outcomes[2]):
        assert 150 <= (slow.duration_ms or 0) < 1000  # its own time, not the batch's


def test_a_batch_needs_two_tasks_and_leaves_invalid_ones_alone(solo: PythonPool) -> None:
    bad = dataclasses.replace(task(2, DOUBLE, x=1), spec={})
    assert solo.run_ahead([task(1, DOUBLE, x=1)]) == 0
    assert solo.run_ahead([task(1, DOUBLE, x=1), task(3, DOUBLE, x=3, timeout_ms=0)]) == 0

    assert solo.run_ahead([task(1, DOUBLE, x=1), bad, task(3, DOUBLE, x=3)]) == 2
    refused = solo.run(bad)  # left to its own run, which refuses the spec
    assert refused.error_type == "FatalError"
    assert solo.run(task(1, DOUBLE, x=1)).this == 2
    assert solo.run(task(3, DOUBLE, x=3)).this == 6


LOOP = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: ahead}
workflow:
  - step: fan
    loop:
      collection: "{{ range(40) | list }}"
      element: x
      mode: parallel
      max_concurrency: 40
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            if args['x'] == 13:
                time.sleep(30)
            print('item', args['x'])
            return args['x'] * 2
      args: {x: "{{ x }}"}
      timeout_ms: 1500
    result:
      collect: {into: doubled, mode: list}
"""


def test_an_embedded_loop_runs_items_ahead_with_their_own_timeouts(tmp_path: Path) -> None:
    playbook = load_playbook_text(LOOP, "ahead.yaml").require()
    with embedded_runtime(str(tmp_path / "ahead.db"), workers=1) as runtime:
        started = time.monotonic()
        result = runtime.run(playbook)
        elapsed = time.monotonic() - started
        events = runtime.store.load_events(result.execution_id)
    finished = [e for e in events if e.type == "loop.iteration.finished"]
    outcomes = {e.payload["index"]: e.payload for e in finished}
    assert sorted(outcomes) == list(range(40))
    failed = sorted(i for i, p in outcomes.items() if not p.get("ok"))
    assert failed == [13]  # only the item that ran past its own timeout
    assert elapsed < 20  # the others did not wait out the slow one's 30 s
    processed = [e for e in events if e.type == "tool.processed"]
    assert len(processed) >= 40


@pytest.mark.parametrize(("sleep_s", "batched"), [(0, True), (0.005, False)])
def test_the_lane_batches_short_tasks_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleep_s: float, batched: bool
) -> None:
    batches = count_batches(monkeypatch)
    n = 300
    text = python_loop(n, f"time.sleep({sleep_s})\nreturn args['x'] * 2")
    playbook = load_playbook_text(text, "lane.yaml").require()
    with embedded_runtime(str(tmp_path / "lane.db"), workers=2) as runtime:
        result = runtime.run(playbook)
    assert result.status.value == "ok"
    assert sorted(result.context["doubled"]) == [x * 2 for x in range(n)]
    if batched:
        assert batches and max(batches) > 1
    else:  # 5 ms tasks: a round trip is nothing next to them, and a batch would hold back
        assert batches == []


def test_a_batch_that_cannot_start_a_child_gives_its_slot_back(
    solo: PythonPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The only child died while idle and no new one can start: the batch is not run,
    and the pool's one slot comes back (else every later call would wait forever)."""
    (child,) = [c for c in solo._free if c is not None]
    monkeypatch.setattr(type(child), "died_while_idle", lambda self: True)

    def cannot_start(self: PythonPool) -> None:
        from noetl.worker.python_child import CallFailure

        raise CallFailure("could not start a python process", "ProcessError", retryable=True)

    monkeypatch.setattr(PythonPool, "_start", cannot_start)
    assert solo.run_ahead([task(1, DOUBLE, x=1), task(2, DOUBLE, x=2)]) == 0
    monkeypatch.undo()

    done: list[Outcome] = []
    runner = threading.Thread(target=lambda: done.append(solo.run(task(3, DOUBLE, x=3))))
    runner.start()
    runner.join(timeout=30)
    assert not runner.is_alive(), "the slot was never given back"
    assert done[0].this == 6


def test_a_batch_on_a_slot_without_a_child_that_cannot_start_one_gives_it_back(
    solo: PythonPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot whose child could not be restarted earlier holds none: the batch tries to
    start one, cannot, and still gives the slot back."""
    (child,) = [c for c in solo._free if c is not None]
    child.stop()
    solo._free[:] = [None]  # as `_release` leaves it when a restart failed

    def cannot_start(self: PythonPool) -> None:
        from noetl.worker.python_child import CallFailure

        raise CallFailure("could not start a python process", "ProcessError", retryable=True)

    monkeypatch.setattr(PythonPool, "_start", cannot_start)
    assert solo.run_ahead([task(1, DOUBLE, x=1), task(2, DOUBLE, x=2)]) == 0
    monkeypatch.undo()
    assert solo.run(task(3, DOUBLE, x=3)).this == 6
