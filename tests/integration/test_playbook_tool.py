"""The `playbook` tool: child executions in the embedded runtime (a real SQLite file), and
its idempotency against a store when a task runs again (a re-run after a lease expiry)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from noetl.core import ExecutionStatus, Task
from noetl.decision.decider import Decider
from noetl.decision.workloads import stored_workload
from noetl.dsl.validate import load_playbook_text
from noetl.paths import Roots
from noetl.runtime.children import StoreLauncher
from noetl.runtime.local import embedded_runtime
from noetl.runtime.orchestrator import Orchestrator
from noetl.store import SqliteStore
from noetl.store.base import ExecutionRecord, Store
from noetl.tools.playbook import PlaybookTool, child_execution_id
from noetl.worker.runner import Worker, WorkerConfig
from noetl.worker.tools import NoopTool, ToolRegistry

CHILD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child}
workload: {n: 1, sleep: 0}
workflow:
  - step: double
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            time.sleep(args["sleep"])
            return {"n": args["n"], "doubled": args["n"] * 2}
      args: {n: "{{ workload.n }}", sleep: "{{ workload.sleep }}"}
    result: {as: result}
"""

FAILING_CHILD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: failing_child}
workflow:
  - step: boom
    tool:
      kind: python
      code: |
        def main(context, args):
            raise ValueError("the child broke")
"""


def parent(tool: str, *, loop: str = "", result: str = "result: {as: child}") -> str:
    return (
        "apiVersion: noetl.io/v2\n"
        "kind: Playbook\n"
        "metadata: {name: parent}\n"
        "workflow:\n"
        "  - step: call\n"
        f"{loop}"
        f"    tool: {tool}\n"
        f"    {result}\n"
    )


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def children(store: Store, parent_id: str) -> list[ExecutionRecord]:
    return [r for r in store.list_executions(limit=1000) if r.parent_execution_id == parent_id]


WORKLOADS: dict[str, dict[str, Any]] = {}


def run_parent(tmp_path: Path, text: str, *, workers: int = 2, register: str | None = None) -> Any:
    roots = Roots(tmp_path, tmp_path)  # the child playbooks are written there
    with embedded_runtime(str(tmp_path / "noetl.db"), workers=workers, roots=roots) as runtime:
        if register is not None:
            runtime.store.register_playbook("tests/child", "child", register, time.time())
            runtime.store.register_playbook("tests/child", "child", CHILD, time.time())
        playbook = load_playbook_text(text, "parent.yaml").require()
        result = runtime.run(playbook, source_text=text)
        kids = children(runtime.store, result.execution_id)
        # The workloads the children started with, from their logs (stored only there).
        for kid in kids:
            WORKLOADS[kid.execution_id] = stored_workload(runtime.store, kid.execution_id)
        return result, kids


def test_a_child_runs_with_the_workload_override_and_its_context_is_saved(
    tmp_path: Path,
) -> None:
    child_path = write(tmp_path, "child.yaml", CHILD)
    text = parent(f'{{kind: playbook, path: "{child_path}", args: {{n: 21}}}}')
    result, kids = run_parent(tmp_path, text)
    assert result.status is ExecutionStatus.OK, result
    (kid,) = kids
    assert result.context["child"] == {
        "execution_id": kid.execution_id,
        "status": "ok",
        "context": {"result": {"n": 21, "doubled": 42}},
    }
    assert kid.parent_execution_id == result.execution_id
    assert kid.status is ExecutionStatus.OK
    assert kid.playbook_path == child_path
    assert WORKLOADS[kid.execution_id] == {"n": 21, "sleep": 0}
    assert kid.execution_id == child_execution_id(f"{result.execution_id}:call")


def test_a_failing_child_fails_the_parent_step(tmp_path: Path) -> None:
    child_path = write(tmp_path, "failing.yaml", FAILING_CHILD)
    result, kids = run_parent(tmp_path, parent(f'{{kind: playbook, path: "{child_path}"}}'))
    assert result.status is ExecutionStatus.FAIL
    (kid,) = kids
    assert kid.status is ExecutionStatus.FAIL
    error = result.steps["call"]["error"]
    assert f"child execution {kid.execution_id}" in error
    assert "finished fail" in error
    assert "step 'boom' failed" in error and "the child broke" in error


def test_a_missing_child_playbook_fails_the_step_naming_the_path(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere.yaml")
    result, kids = run_parent(tmp_path, parent(f'{{kind: playbook, path: "{missing}"}}'))
    assert result.status is ExecutionStatus.FAIL
    assert kids == []
    assert f"playbook {missing!r} is neither registered nor a file" in result.steps["call"]["error"]


def test_a_child_past_the_timeout_is_canceled_and_fails_the_step(tmp_path: Path) -> None:
    child_path = write(tmp_path, "child.yaml", CHILD)
    tool = f'{{kind: playbook, path: "{child_path}", timeout_ms: 200, args: {{sleep: 1.5}}}}'
    result, kids = run_parent(tmp_path, parent(tool))
    assert result.status is ExecutionStatus.FAIL
    (kid,) = kids
    assert kid.status is ExecutionStatus.CANCELED
    error = result.steps["call"]["error"]
    assert f"child execution {kid.execution_id} did not finish within 200 ms" in error


def test_a_parallel_loop_of_children_on_two_workers_does_not_deadlock(tmp_path: Path) -> None:
    child_path = write(tmp_path, "child.yaml", CHILD)
    loop = "    loop: {collection: [1, 2, 3, 4], element: x, mode: parallel, max_concurrency: 4}\n"
    tool = f'{{kind: playbook, path: "{child_path}", args: {{n: "{{{{ x }}}}", sleep: 0.2}}}}'
    text = parent(tool, loop=loop, result="result: {collect: {into: kids, mode: list}}")
    started = time.monotonic()
    result, kids = run_parent(tmp_path, text, workers=2)
    assert time.monotonic() - started < 60
    assert result.status is ExecutionStatus.OK, result
    assert len(kids) == 4
    assert {k.status for k in kids} == {ExecutionStatus.OK}
    doubled = [k["context"]["result"]["doubled"] for k in result.context["kids"]]
    assert doubled == [2, 4, 6, 8]


def test_a_registered_child_by_path_and_version(tmp_path: Path) -> None:
    version_one = CHILD.replace('"doubled": args["n"] * 2', '"doubled": -1')
    text = parent("{kind: playbook, path: tests/child, version: 1, args: {n: 5}}")
    result, kids = run_parent(tmp_path, text, register=version_one)
    assert result.status is ExecutionStatus.OK, result
    assert result.context["child"]["context"]["result"] == {"n": 5, "doubled": -1}
    (kid,) = kids
    assert kid.playbook_path == "tests/child"
    latest = parent("{kind: playbook, path: tests/child, args: {n: 5}}")
    result, _ = run_parent(tmp_path, latest, register=version_one)
    assert result.context["child"]["context"]["result"] == {"n": 5, "doubled": 10}
    unknown = parent("{kind: playbook, path: tests/child, version: 7}")
    result, _ = run_parent(tmp_path, unknown, register=version_one)
    assert result.status is ExecutionStatus.FAIL
    assert "version 7 of playbook 'tests/child' is not registered" in result.steps["call"]["error"]


NOOP_CHILD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: noop_child}
workload: {n: 0}
workflow:
  - step: only
    tool: {kind: noop, args: {n: "{{ workload.n }}"}}
    result: {as: got}
"""


class Services:
    """A server's orchestrator and a worker (noop tool only) as threads over one store."""

    def __init__(self, store: Store) -> None:
        self.stop = threading.Event()
        server = Orchestrator(store, owner="server")
        worker = Worker(
            store,
            ToolRegistry([NoopTool()]),
            WorkerConfig(concurrency=2, poll_s=0.02, worker_id="w1"),
            decider=Decider(store),
        )
        self.threads = [
            threading.Thread(
                target=server.serve, args=(self.stop.is_set,), kwargs={"idle_wait": 0.02}
            ),
            threading.Thread(target=worker.run, args=(self.stop.is_set,)),
        ]
        for thread in self.threads:
            thread.start()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)


def playbook_task(parent_id: str, path: str, *, attempt: int = 1, **args: Any) -> Task:
    return Task(
        task_id=f"{parent_id}.call",
        execution_id=parent_id,
        step="call",
        kind="playbook",
        spec={"path": path},
        args=args,
        context={},
        key=f"{parent_id}:call",
        attempt=attempt,
    )


def test_running_the_task_again_finds_the_child_it_started(tmp_path: Path) -> None:
    """The first run stops waiting (its worker "crashed" once the child existed); the
    run after the lease expiry starts no second child and waits for the first one."""
    store = SqliteStore(tmp_path / "db.sqlite")
    try:
        store.register_playbook("tests/noop_child", "noop_child", NOOP_CHILD, time.time())
        parent_id = Orchestrator(store, owner="api").start_execution(parent("{kind: noop}"))
        task = playbook_task(parent_id, "tests/noop_child", n=7)
        child_id = child_execution_id(task.key)
        crashed = StoreLauncher(
            Decider(store), stopping=lambda: store.get_execution(child_id) is not None
        )
        first = PlaybookTool(crashed).run(task)
        assert not first.ok and first.error_type == "Interrupted"
        assert [k.execution_id for k in children(store, parent_id)] == [child_id]
        # Nothing ran the child meanwhile; now a server and a worker do, and the task
        # runs again (attempt 2: the lease expired) on another worker.
        services = Services(store)
        try:
            again = PlaybookTool(StoreLauncher(Decider(store))).run(
                playbook_task(parent_id, "tests/noop_child", attempt=2, n=7)
            )
        finally:
            services.close()
        assert again.ok, again
        assert again.this == {
            "execution_id": child_id,
            "status": "ok",
            "context": {"got": {"n": 7}},
        }
        assert [k.execution_id for k in children(store, parent_id)] == [child_id]
        # Starting an id that exists is "already started", not an error.
        assert not StoreLauncher(Decider(store)).launch(
            NOOP_CHILD,
            path="tests/noop_child",
            workload={},
            execution_id=child_id,
            parent_execution_id=parent_id,
        )
        assert len(children(store, parent_id)) == 1
    finally:
        store.close()


def test_a_retry_after_a_failed_child_starts_a_new_one(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db.sqlite")
    # The worker has no python tool: this child fails.
    path = write(tmp_path, "failing.yaml", FAILING_CHILD)
    services = Services(store)
    try:
        parent_id = Orchestrator(store, owner="api").start_execution(parent("{kind: noop}"))
        tool = PlaybookTool(StoreLauncher(Decider(store)), root=tmp_path)
        first = tool.run(playbook_task(parent_id, path))
        retried = tool.run(playbook_task(parent_id, path, attempt=2))
        again = tool.run(playbook_task(parent_id, path, attempt=2))
        kids = children(store, parent_id)
    finally:
        services.close()
        store.close()
    assert not first.ok and first.error_type == "ChildExecutionFailed"
    assert not first.retryable  # retried only under the step's own `retry` policy
    key = f"{parent_id}:call"
    first_child, second_child = child_execution_id(key), child_execution_id(key, 2)
    assert first_child != second_child
    assert first_child in (first.error or "")
    assert not retried.ok and second_child in (retried.error or "")
    assert not again.ok and second_child in (again.error or "")  # same attempt, same child
    assert sorted(k.execution_id for k in kids) == sorted([first_child, second_child])
