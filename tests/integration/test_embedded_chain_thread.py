"""A chain in the embedded runtime: a lone outcome is decided on its worker's thread.

With no other task in flight and the deciding thread idle, the worker that ran a step
decides its outcome, writes the decision and runs the next step itself (already sent to a
child). These tests run real python children over a real SQLite file and look at which
threads decided and ran, that `wait` is woken when such a decision ends the execution,
that a failure to write such a decision is raised by `wait`, and that closing the runtime
in the middle of a chain gives every child back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

from noetl.core import Event, ExecutionStatus, Outcome, StoreUnavailableError, Task
from noetl.core.views import ExecutionView
from noetl.dsl import load_playbook_text
from noetl.dsl.graph import Graph
from noetl.dsl.model import Playbook
from noetl.observability.observer import NoopObserver
from noetl.runtime.local import embedded_runtime
from noetl.store.base import Append


def chain(n: int) -> Playbook:
    steps = "\n".join(
        f"""  - step: s{i}
    tool:
      kind: python
      args: {{v: "{{{{ {"0" if i == 0 else "v"} }}}}"}}
      code: |
        def main(context, args):
            return int(args['v']) + 1
    result: {{as: v}}
    next: [{{step: {"s" + str(i + 1) if i + 1 < n else "end"}}}]"""
        for i in range(n)
    )
    text = f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: chain}}
workflow:
{steps}
  - step: end
"""
    return load_playbook_text(text, "chain.yaml").require()


class Threads(NoopObserver):
    """The name of the thread of each commit (of a step's outcome)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def committed(self, graph: Graph, state: ExecutionView, events: Sequence[Event]) -> None:
        if any(event.type == "tool.processed" for event in events):
            self.names.append(threading.current_thread().name)


def test_a_chain_is_decided_and_run_on_one_worker_thread(tmp_path: Path) -> None:
    steps = 12
    with embedded_runtime(str(tmp_path / "db.sqlite"), workers=2) as runtime:
        runtime.run(chain(2))  # the python children are warm, the pace is known
        threads = Threads()
        runtime.observer = threads
        ran: list[str] = []
        tools = runtime.tools
        run = tools.run

        def recording(task: Task) -> Outcome:
            ran.append(threading.current_thread().name)
            return run(task)

        tools.run = recording  # type: ignore[method-assign]
        result = runtime.run(chain(steps))
    assert result.status == ExecutionStatus.OK
    assert result.context["v"] == steps
    assert len(threads.names) == steps
    on_workers = [name for name in threads.names if name.startswith("noetl-python-")]
    # Every outcome but, at times, the first is decided where it ran.
    assert len(on_workers) >= steps - 2, threads.names
    # And each step ran on the thread that decided the one before: one thread ran them
    # all (but, at times, one after a turn of the deciding thread took an outcome).
    assert max(ran.count(name) for name in ran) >= steps - 2, ran


def test_wait_is_woken_when_a_worker_ends_the_execution(tmp_path: Path) -> None:
    with embedded_runtime(str(tmp_path / "db.sqlite"), workers=2) as runtime:
        runtime.run(chain(2))
        execution_id = runtime.start(chain(3))
        began = time.monotonic()
        # Without a wake-up, `wait` would look again only after its interval.
        (result,) = runtime.wait([execution_id], progress_interval=30.0)
        took = time.monotonic() - began
    assert result.status == ExecutionStatus.OK
    assert took < 10.0


class Failing:
    """The store's commit, failing once as an unavailable database: its `after`-th call."""

    def __init__(self, commit: object, after: int) -> None:
        self.commit = commit
        self.after = after
        self.calls = 0

    def __call__(self, appends: Sequence[Append]) -> None:
        self.calls += 1
        if self.calls == self.after:
            raise StoreUnavailableError("the database went away")
        self.commit(appends)  # type: ignore[operator]


def test_a_failure_to_write_a_workers_decision_is_raised_by_wait(tmp_path: Path) -> None:
    with embedded_runtime(str(tmp_path / "db.sqlite"), workers=2) as runtime:
        runtime.run(chain(2))
        runtime.store.commit = Failing(runtime.store.commit, after=4)  # type: ignore[method-assign]
        execution_id = runtime.start(chain(10))
        raised: list[BaseException] = []

        def waiting() -> None:
            try:
                runtime.wait([execution_id])
            except BaseException as exc:
                raised.append(exc)

        thread = threading.Thread(target=waiting, daemon=True)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive(), "wait did not return"
    assert len(raised) == 1
    assert isinstance(raised[0], StoreUnavailableError)
    assert "went away" in str(raised[0])


def test_closing_in_the_middle_of_a_chain_gives_every_child_back(tmp_path: Path) -> None:
    with embedded_runtime(str(tmp_path / "db.sqlite"), workers=2) as runtime:
        runtime.run(chain(2))
        execution_id = runtime.start(chain(2000))
        deadline = time.monotonic() + 20
        while runtime.state(execution_id).seq < 60 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runtime.state(execution_id).seq >= 60, "the chain did not run on its own"
        pool = runtime._pool._ahead
        assert pool is not None
        began = time.monotonic()
        runtime.close()
        took = time.monotonic() - began
        assert pool._leased == 0
    assert took < 5.0


def test_one_python_process_runs_a_chain(tmp_path: Path) -> None:
    with embedded_runtime(str(tmp_path / "db.sqlite"), workers=1) as runtime:
        result = runtime.run(chain(5))
    assert result.status == ExecutionStatus.OK
    assert result.context["v"] == 5
