"""A worker whose own parts fail keeps serving, and never keeps dead work alive.

An orchestrator and a worker run as threads over one SQLite file. The tool is `noop` or a
stand-in registered under that kind: one that returns a value no store can encode (a set,
which is not JSON), or one that takes its time. Thread deaths are injected by making the
reporter's or the heartbeat's next call raise SystemExit, which ends a thread silently.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Outcome, Task
from noetl.decision.decider import Decider
from noetl.runtime.orchestrator import Orchestrator
from noetl.store import SqliteStore
from noetl.store.base import Store
from noetl.worker.reporting import Report
from noetl.worker.runner import Worker, WorkerConfig
from noetl.worker.tools import NoopTool, ToolRegistry


class Odd(NoopTool):
    """`noop`, except that `args.odd` makes it return a set (not JSON) and `args.sleep`
    makes it take that long."""

    def run(self, task: Task) -> Outcome:
        time.sleep(float(task.args.get("sleep", 0)))
        if task.args.get("odd"):
            return Outcome(task.task_id, ok=True, this={"values": {1, 2}})
        return super().run(task)


def playbook(name: str, **args: Any) -> str:
    rendered = ", ".join(f"{key}: {value}" for key, value in args.items())
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: {name}}}
workflow:
  - step: only
    tool: {{kind: noop, args: {{{rendered}}}}}
    result: {{as: got}}
"""


LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: loop}
workflow:
  - step: items
    loop: {collection: [1, 2, 3], element: n, mode: parallel}
    tool: {kind: noop, args: {n: "{{ n }}", odd: "{{ n == 2 }}"}}
    result: {collect: {into: got, mode: list}}
"""


class Services:
    """The orchestrator and one worker as threads; `stop()` is a hard stop."""

    def __init__(self, store: Store, *, lease_s: float, decide: bool = True) -> None:
        self.store = store
        self.orchestrator = Orchestrator(store, owner="server", reap_interval_s=0.1)
        self.worker = Worker(
            store,
            ToolRegistry([Odd()]),
            WorkerConfig(concurrency=3, lease_s=lease_s, poll_s=0.02, worker_id="w1"),
            decider=Decider(store) if decide else None,
        )
        self.halt = threading.Event()
        self.threads = [
            threading.Thread(
                target=self.orchestrator.serve,
                args=(self.halt.is_set,),
                kwargs={"idle_wait": 0.02},
                daemon=True,  # a failed test must not keep the session alive
            ),
            threading.Thread(target=self.worker.run, args=(self.halt.is_set,), daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def run(self, text: str, timeout: float = 20.0) -> str:
        execution_id = self.orchestrator.start_execution(text)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.store.get_execution(execution_id)
            if record is not None and record.status.terminal:
                return execution_id
            time.sleep(0.01)
        raise AssertionError(f"execution {execution_id} did not finish")

    def status(self, execution_id: str) -> str:
        record = self.store.get_execution(execution_id)
        assert record is not None
        return str(record.status)

    def events(self, execution_id: str, type_: str) -> list[dict[str, Any]]:
        return [
            {"step": e.step, **e.payload}
            for e in self.store.load_events(execution_id)
            if e.type == type_
        ]

    def stop(self) -> None:
        self.halt.set()
        for thread in self.threads:
            thread.join(timeout=10)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = SqliteStore(tmp_path / "db.sqlite")
    try:
        yield opened
    finally:
        opened.close()


@pytest.mark.parametrize("decide", [True, False], ids=["continuation", "inbox"])
def test_a_result_the_store_cannot_encode_fails_its_task_and_the_worker_keeps_serving(
    store: Store, decide: bool
) -> None:
    services = Services(store, lease_s=30.0, decide=decide)
    try:
        refused = services.run(playbook("refused", odd="true"))
        assert services.status(refused) == "fail"
        (processed,) = services.events(refused, "tool.processed")
        assert (processed["ok"], processed["error_type"]) == (False, "ReportError")
        assert "could not report the task's result" in processed["error"]
        assert "not JSON serializable" in processed["error"]
        (dead,) = store.list_dead_letters(execution_id=refused)
        assert (dead.reason, dead.error_type) == ("fatal", "ReportError")

        # Reported together with the others of its loop, it fails alone.
        loop = services.run(LOOP)
        items = services.events(loop, "loop.iteration.finished")
        assert sorted((item["index"], item["ok"]) for item in items) == [
            (0, True),
            (1, False),
            (2, True),
        ]
        assert services.status(services.run(playbook("fine", n=1))) == "ok"
    finally:
        services.stop()
    assert services.worker.stats.errors == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_reporter_thread_that_dies_is_replaced_and_its_task_not_kept_alive(
    store: Store,
) -> None:
    services = Services(store, lease_s=1.0, decide=False)
    reporter = services.worker._reporter
    send = reporter.send
    died: list[str] = []

    def dies_once(batch: list[Report]) -> None:
        if not died:
            died.append(batch[0].lease.task.task_id)
            raise SystemExit  # ends the reporter thread, as any uncaught BaseException
        send(batch)

    reporter.send = dies_once  # type: ignore[method-assign]
    try:
        first = services.run(playbook("first", n=1))
        # Its report died with the thread: the task left the worker, its lease ran out,
        # and it ran again on the replacement thread.
        assert services.status(first) == "ok"
        reclaimed = services.events(first, "task.reclaimed")
        assert [r["task_id"] for r in reclaimed] == died == [f"{first}.only"]
        assert services.status(services.run(playbook("second", n=2))) == "ok"
        names = {t.name for t in threading.enumerate()}
        assert "noetl-reporter" in names
    finally:
        services.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_heartbeat_thread_that_dies_is_replaced_before_a_lease_runs_out(
    store: Store,
) -> None:
    services = Services(store, lease_s=1.0)  # a beat every third of a second
    heartbeats = services.worker._heartbeats
    beat = heartbeats.beat_once
    died: list[bool] = []

    def dies_once() -> None:
        if not died:
            died.append(True)
            raise SystemExit
        beat()

    heartbeats.beat_once = dies_once  # type: ignore[method-assign]
    try:
        slow = services.run(playbook("slow", sleep=2.5))  # outlives two leases
        assert died == [True]
        assert services.status(slow) == "ok"
        assert services.events(slow, "task.reclaimed") == []
    finally:
        services.stop()


def test_a_claim_loop_failure_is_survived(store: Store) -> None:
    services = Services(store, lease_s=30.0)
    claim = store.claim
    failures: list[str] = []

    def fails_twice(*args: Any, **kwargs: Any) -> Any:
        if len(failures) < 2:
            failures.append("claim")
            raise RuntimeError("a bug in the claim")
        return claim(*args, **kwargs)

    store.claim = fails_twice  # type: ignore[method-assign]
    try:
        assert services.status(services.run(playbook("after", n=1))) == "ok"
        assert failures == ["claim", "claim"]
    finally:
        services.stop()


def test_a_hard_stop_hands_the_tasks_in_flight_back(store: Store) -> None:
    services = Services(store, lease_s=60.0)
    execution_id = services.orchestrator.start_execution(playbook("slow", sleep=30))
    task_id = f"{execution_id}.only"

    def leased() -> bool:
        row = store.get_task(task_id)
        return row is not None and row["status"] == "leased"

    deadline = time.monotonic() + 10
    while not leased():
        assert time.monotonic() < deadline, "the task was never leased"
        time.sleep(0.01)
    stopped_at = time.monotonic()
    services.stop()  # the noop stand-in sleeps on: the worker must not wait for it
    assert time.monotonic() - stopped_at < 5
    assert not services.threads[1].is_alive()
    row = store.get_task(task_id)
    assert row is not None
    assert (row["status"], row["worker_id"]) == ("queued", None)
    assert services.worker.stats.released == 1
