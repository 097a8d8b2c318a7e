"""Distributed mode under faults: real server and worker processes on a real PostgreSQL.

Each test gets a fresh database. Steps append a line to a file every time they RUN, so
the tests can tell a step that ran twice from a step that was only dispatched once.
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from noetl.store import open_store
from noetl.store.base import Store, TaskStatus
from tests.distributed.cluster import ROOT, Cluster, free_port, wait_until
from tests.helpers.cli import noetl
from tests.helpers.private_pg import private_postgres, private_postgres_missing

pytestmark = [pytest.mark.services, pytest.mark.slow]

RECORD = """\
import time
def main(context, args):
    with open(args["out"], "a") as fh:
        fh.write(args["step"] + "\\n")
    time.sleep(args.get("sleep", 0))
    return args["step"]
"""


def chain(names: list[str], sleep: float) -> str:
    lines = ["apiVersion: noetl.io/v2", "kind: Playbook", "metadata: {name: faults}", "workflow:"]
    for index, name in enumerate(names):
        lines += [
            f"  - step: {name}",
            "    tool:",
            "      kind: python",
            f"      code: {json.dumps(RECORD)}",
            f'      args: {{out: "{{{{ workload.out }}}}", step: {name}, sleep: {sleep}}}',
        ]
        if index + 1 < len(names):
            lines.append(f"    next: {names[index + 1]}")
    return "\n".join(lines) + "\n"


def runs(path: Path) -> collections.Counter[str]:
    if not path.exists():
        return collections.Counter()
    return collections.Counter(path.read_text(encoding="utf-8").split())


@pytest.fixture
def store(pg_database: str) -> Iterator[Store]:
    st = open_store(pg_database)
    try:
        yield st
    finally:
        st.close()


def leased_by(store: Store, task_id: str) -> str:
    """Wait until the task is leased; return the holder's worker id."""
    holder = ""

    def check() -> bool:
        nonlocal holder
        row = store.get_task(task_id)
        if row is not None and row["status"] == TaskStatus.LEASED:
            holder = str(row["worker_id"])
            return True
        return False

    wait_until(check, 30, f"{task_id} to be leased", interval=0.05)
    return holder


def started_counts(events: list[dict[str, Any]]) -> collections.Counter[str]:
    return collections.Counter(e["step"] for e in events if e["type"] == "step.started")


def test_killed_worker_task_is_reclaimed_and_completes(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    cluster.start_server()
    workers = [cluster.start_worker(f"w{i}", lease_s=2.0, concurrency=1) for i in (1, 2)]
    execution_id = cluster.start_execution(chain(["slow", "after"], 4.0), {"out": str(out)})
    holder = leased_by(store, f"{execution_id}.slow")
    victim = next(w for w in workers if f":{w.pid}:" in holder)
    victim.kill9()
    result = cluster.wait_finished(execution_id, timeout=60)
    assert result["status"] == "ok", result
    events = cluster.events(execution_id)
    reclaimed = [e for e in events if e["type"] == "task.reclaimed"]
    assert [e["payload"]["task_id"] for e in reclaimed] == [f"{execution_id}.slow"]
    assert reclaimed[0]["payload"]["attempt"] == 2
    assert started_counts(events) == {"slow": 1, "after": 1}
    assert [e["step"] for e in events if e["type"] == "tool.processed"] == ["slow", "after"]
    assert runs(out)["after"] == 1


def test_killed_server_restarts_and_resumes_without_running_a_step_twice(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    names = [f"s{i}" for i in range(6)]
    server = cluster.start_server()
    cluster.start_worker("w1", lease_s=5.0)
    cluster.start_worker("w2", lease_s=5.0)
    execution_id = cluster.start_execution(chain(names, 0.4), {"out": str(out)})
    wait_until(lambda: runs(out)["s2"] == 1, 30, "step s2 to run")
    server.kill9()
    time.sleep(1.0)  # outcomes keep arriving in the inbox while no server runs
    cluster.start_server(port=cluster.port, name="server2")
    result = cluster.wait_finished(execution_id, timeout=60)
    assert result["status"] == "ok", result
    events = cluster.events(execution_id)
    assert started_counts(events) == dict.fromkeys(names, 1)
    assert runs(out) == dict.fromkeys(names, 1)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


def test_stalled_worker_late_result_is_refused(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    cluster.start_server()
    stalled = cluster.start_worker("stalled", lease_s=1.5, concurrency=1)
    execution_id = cluster.start_execution(chain(["slow"], 2.0), {"out": str(out)})
    task_id = f"{execution_id}.slow"
    leased_by(store, task_id)
    stalled.signal(signal.SIGSTOP)
    try:
        cluster.start_worker("rescuer", lease_s=5.0, concurrency=1)
        result = cluster.wait_finished(execution_id, timeout=60)
    finally:
        stalled.signal(signal.SIGCONT)
    assert result["status"] == "ok", result
    time.sleep(2.0)  # the stalled worker wakes up and tries to report its result
    events = cluster.events(execution_id)
    assert len([e for e in events if e["type"] == "tool.processed"]) == 1
    assert len(events) == len(cluster.events(execution_id))  # nothing arrived late
    row = store.get_task(task_id)
    assert row is not None and row["lease_token"] == 2 and row["status"] == TaskStatus.DONE
    stalled.stop()
    log = stalled.output()
    assert "1 refused" in log or "1 lost" in log, log


def test_two_servers_never_dispatch_a_step_twice(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    out_dir = tmp_path / "runs"
    out_dir.mkdir()
    names = ["a", "b", "c"]
    cluster.start_server(name="server1")
    second = free_port()
    cluster.start_server(port=second, name="server2")
    cluster.start_worker("w1", lease_s=10.0, concurrency=4)
    cluster.start_worker("w2", lease_s=10.0, concurrency=4)
    playbook = chain(names, 0.0)
    ids = [cluster.start_execution(playbook, {"out": str(out_dir / f"{i}.txt")}) for i in range(30)]
    for index, execution_id in enumerate(ids):
        result = cluster.wait_finished(execution_id, timeout=120)
        assert result["status"] == "ok", result
        events = store.load_events(execution_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert collections.Counter(
            e.step for e in events if e.type == "step.started"
        ) == dict.fromkeys(names, 1)
        assert runs(out_dir / f"{index}.txt") == dict.fromkeys(names, 1)


def test_hundred_executions_at_once_all_finish_consistently(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    cluster.start_server()
    cluster.start_worker("w1", lease_s=10.0, concurrency=4)
    cluster.start_worker("w2", lease_s=10.0, concurrency=4)
    playbook = chain(["x", "y", "z"], 0.0)
    with ThreadPoolExecutor(max_workers=10) as pool:
        ids = list(
            pool.map(
                lambda i: cluster.start_execution(playbook, {"out": str(tmp_path / f"{i}.txt")}),
                range(100),
            )
        )
    assert len(set(ids)) == 100
    for execution_id in ids:
        assert cluster.wait_finished(execution_id, timeout=180)["status"] == "ok"
        events = store.load_events(execution_id)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert events[0].type == "workflow.started"
        assert events[-1].type == "workflow.finished"
        assert sum(1 for e in events if e.type == "step.started") == 3


def test_examples_through_the_cli_on_postgres(cluster: Cluster) -> None:
    cluster.start_server()
    cluster.start_worker("w1")
    cluster.start_worker("w2")
    expected = {
        "hello_world": "ok",
        "fan_out_join": "ok",
        "parallel_loop_collect": "ok",
        "conditional_routing": "ok",
        "failure_compensation": "ok",
        "saga": "fail",
        "upstream_pipeline": "ok",
    }
    started: dict[str, str] = {}
    for name in expected:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "noetl",
                "exec",
                "start",
                "--server",
                cluster.url,
                "--token",
                cluster.token,
                "--workflow",
                str(ROOT / "examples" / f"{name}.yaml"),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        started[name] = json.loads(proc.stdout)["execution_id"]
    for name, execution_id in started.items():
        result = cluster.wait_finished(execution_id, timeout=90)
        assert result["status"] == expected[name], (name, result)
    squares = cluster.execution(started["parallel_loop_collect"])["context"]["squares"]
    assert squares == [1, 4, 9, 16, 25, 36, 49, 64, 81, 100]
    saga = cluster.execution(started["saga"])["steps"]
    assert saga["refund"]["status"] == "ok" and saga["release"]["status"] == "ok"


@pytest.mark.skipif(private_postgres_missing() is not None, reason=str(private_postgres_missing()))
def test_postgres_restart_during_a_run(tmp_path: Path) -> None:
    """PostgreSQL restarts in the middle of a run: its own server, so the restart touches
    no other test's database."""
    out = tmp_path / "runs.txt"
    names = [f"s{i}" for i in range(8)]
    with private_postgres() as pg:
        cluster = Cluster(db=pg.dsn, workdir=tmp_path)
        st = open_store(pg.dsn)
        try:
            cluster.start_server()
            cluster.start_worker("w1", lease_s=10.0)
            cluster.start_worker("w2", lease_s=10.0)
            execution_id = cluster.start_execution(chain(names, 0.3), {"out": str(out)})
            wait_until(lambda: runs(out)["s2"] == 1, 30, "step s2 to run")
            pg.restart()
            result = cluster.wait_finished(execution_id, timeout=120)
            assert result["status"] == "ok", result
            events = st.load_events(execution_id)
        finally:
            st.close()
            cluster.stop_all()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    started = collections.Counter(e.step for e in events if e.type == "step.started")
    assert started == dict.fromkeys(names, 1)
    assert set(runs(out)) == set(names)


def test_sigterm_drains_a_worker_and_drain_command_stops_the_rest(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    server = cluster.start_server()
    worker = cluster.start_worker("w1", lease_s=10.0, concurrency=1)
    execution_id = cluster.start_execution(chain(["slow", "after"], 2.0), {"out": str(out)})
    leased_by(store, f"{execution_id}.slow")
    worker.signal(signal.SIGTERM)  # drain: the task in flight finishes, nothing new is taken
    assert worker.popen.wait(timeout=30) == 0
    assert "1 completed" in worker.output()
    row = store.get_task(f"{execution_id}.slow")
    assert row is not None and row["status"] == TaskStatus.DONE
    assert runs(out) == {"slow": 1}  # `after` waits for a worker
    second = cluster.start_worker("w2", lease_s=10.0, concurrency=1)
    assert cluster.wait_finished(execution_id, timeout=60)["status"] == "ok"
    proc = noetl("worker", "drain", "--db", cluster.db, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "1 worker(s) asked to drain" in proc.stdout
    assert second.popen.wait(timeout=30) == 0
    assert server.stop() == 0
    assert "noetl server stopped" in server.output()
    statuses = {w.worker_id.split(":")[1]: w.status for w in store.list_workers()}
    assert statuses == {str(worker.pid): "stopped", str(second.pid): "stopped"}


CHILD = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: child}}
workflow:
  - step: work
    tool:
      kind: python
      code: {json.dumps(RECORD)}
      args: {{out: "{{{{ workload.out }}}}", step: "c{{{{ workload.n }}}}", sleep: 3}}
    result: {{as: done}}
"""


def parent_of_children(child_path: Path, out: Path) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: parent}}
workflow:
  - step: call
    loop: {{collection: [1, 2, 3], element: n, mode: parallel}}
    tool:
      kind: playbook
      path: "{child_path}"
      args: {{out: "{out}", n: "{{{{ n }}}}"}}
    result: {{collect: {{into: kids, mode: list}}}}
"""


def test_killed_worker_waiting_for_children_is_replaced_without_duplicate_children(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    child_path = tmp_path / "child.yaml"
    child_path.write_text(CHILD, encoding="utf-8")
    cluster.env["NOETL_PLAYBOOKS_ROOT"] = str(tmp_path)  # the workers read the child there
    cluster.start_server()
    workers = [cluster.start_worker(f"w{i}", lease_s=2.0, concurrency=2) for i in (1, 2)]
    execution_id = cluster.start_execution(parent_of_children(child_path, out))

    def children() -> list[Any]:
        return [
            r for r in store.list_executions(limit=1000) if r.parent_execution_id == execution_id
        ]

    holder = leased_by(store, f"{execution_id}.call.0")
    wait_until(lambda: len(children()) == 3 and sum(runs(out).values()) > 0, 30, "3 children")
    victim = next(w for w in workers if f":{w.pid}:" in holder)
    victim.kill9()
    result = cluster.wait_finished(execution_id, timeout=90)
    assert result["status"] == "ok", result
    kids = children()
    assert len(kids) == 3
    assert {k.status for k in kids} == {"ok"}
    assert [k["context"]["done"] for k in result["context"]["kids"]] == ["c1", "c2", "c3"]
    events = cluster.events(execution_id)
    reclaimed = [e["payload"]["task_id"] for e in events if e["type"] == "task.reclaimed"]
    assert f"{execution_id}.call.0" in reclaimed
    assert set(runs(out)) == {"c1", "c2", "c3"}


RECORD_SLEEPY = RECORD.replace(
    'time.sleep(args.get("sleep", 0))', 'time.sleep(float(args.get("sleep") or 0))'
)


def test_a_worker_killed_mid_chain_leaves_none_of_the_chain_written(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A worker runs s1 to s3 in a chain after s0 (`noetl.worker.chain`) and is killed
    while s3 runs: none of the chain was written, s0's lease expires, and another worker
    runs s0 to s3 again (at least once, as every task) and the rest once; the log holds
    each step once."""
    names = [f"s{i}" for i in range(6)]
    lines = ["apiVersion: noetl.io/v2", "kind: Playbook", "metadata: {name: chained}", "workflow:"]
    for index, name in enumerate(names):
        sleep = "{{ workload.sleep }}" if name == "s3" else "0"
        lines += [
            f"  - step: {name}",
            "    tool:",
            "      kind: python",
            f"      code: {json.dumps(RECORD_SLEEPY)}",
            f'      args: {{out: "{{{{ workload.out }}}}", step: {name}, sleep: "{sleep}"}}',
        ]
        if index + 1 < len(names):
            lines.append(f"    next: {names[index + 1]}")
    playbook = "\n".join(lines) + "\n"
    # A chain may take steps that last ran in under 10 s, for up to 10 s.
    cluster.env["NOETL_WORKER_CHAIN_MS"] = "10000"
    cluster.start_server()
    first = cluster.start_worker("w1", lease_s=2.0, concurrency=1)
    seen = tmp_path / "seen.txt"
    taught = cluster.start_execution(playbook, {"out": str(seen), "sleep": 0})
    assert cluster.wait_finished(taught, timeout=60)["status"] == "ok"

    out = tmp_path / "runs.txt"  # s3 now runs long, but it last ran short: chained
    execution_id = cluster.start_execution(playbook, {"out": str(out), "sleep": 3})
    wait_until(lambda: runs(out)["s3"] == 1, 30, "step s3 to run")
    written = {e["step"] for e in cluster.events(execution_id) if e["type"] == "tool.processed"}
    assert written == set()  # s0 to s2 ran, and are known to the worker only
    first.kill9()
    cluster.start_worker("w2", lease_s=2.0, concurrency=1)
    result = cluster.wait_finished(execution_id, timeout=60)

    assert result["status"] == "ok", result
    assert runs(out) == {"s0": 2, "s1": 2, "s2": 2, "s3": 2, "s4": 1, "s5": 1}
    events = cluster.events(execution_id)
    assert started_counts(events) == dict.fromkeys(names, 1)
    assert [e["step"] for e in events if e["type"] == "tool.processed"] == names
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
