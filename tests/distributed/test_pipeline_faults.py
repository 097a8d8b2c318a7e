"""A pipeline under faults: a worker killed in the middle of a step's tool pipeline, real
server and worker processes on a real PostgreSQL, a real loopback HTTP server.

The worker that ran the pipeline's first task (an http POST, an effect outside NoETL)
dies during its second task. Its lease expires, another worker takes the step's task,
and the pipeline resumes from its checkpoint: the POST is not sent again, the task that
was running when the worker died runs again, and the step ends once.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from noetl.store import open_store
from noetl.store.base import Store, TaskStatus
from tests.distributed.cluster import Cluster, wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]

RECORD = """\
import time
def main(context, args):
    with open(args["out"], "a") as fh:
        fh.write(args["task"] + "\\n")
    time.sleep(args["sleep"])
    return {"task": args["task"], "posted": args["posted"]}
"""


class Effects(ThreadingHTTPServer):
    """Counts POSTs by path and by `Idempotency-Key`."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.posts: Counter[str] = Counter()
        self.keys: Counter[str] = Counter()
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Effects

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.posts[self.path] += 1
            self.server.keys[self.headers.get("Idempotency-Key") or ""] += 1
            number = self.server.posts[self.path]
        data = json.dumps({"n": number}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def effects() -> Iterator[Effects]:
    server = Effects()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def store(pg_database: str) -> Iterator[Store]:
    st = open_store(pg_database)
    try:
        yield st
    finally:
        st.close()


def python_task(name: str, sleep: float) -> dict[str, Any]:
    return {
        "name": name,
        "tool": {
            "kind": "python",
            "args": {
                "out": "{{ workload.out }}",
                "task": name,
                "sleep": sleep,
                "posted": "{{ post.data.n }}",
            },
            "spec": {"code": RECORD},
        },
    }


def playbook() -> str:
    tasks = [
        {
            "name": "post",
            "tool": {
                "kind": "http",
                "spec": {"method": "POST", "url": "{{ workload.api }}/charge", "json": {"n": 1}},
            },
        },
        python_task("slow", 4.0),
        python_task("last", 0.0),
    ]
    document = {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": "pipeline_faults"},
        "workflow": [
            {"step": "charge", "tool": {"kind": "pipeline", "spec": {"tasks": tasks}}},
        ],
    }
    return json.dumps(document)  # JSON is YAML


def test_a_worker_killed_mid_pipeline_resumes_after_the_last_saved_task(
    cluster: Cluster, store: Store, effects: Effects, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    cluster.start_server()
    workers = [cluster.start_worker(f"w{i}", lease_s=2.0, concurrency=1) for i in (1, 2)]
    api = f"http://127.0.0.1:{effects.server_address[1]}"
    execution_id = cluster.start_execution(playbook(), {"out": str(out), "api": api})
    task_id = f"{execution_id}.charge"
    wait_until(lambda: out.exists() and "slow" in out.read_text(), 30, "the slow task to start")
    row = store.get_task(task_id)
    assert row is not None and row["status"] == TaskStatus.LEASED
    victim = next(w for w in workers if f":{w.pid}:" in str(row["worker_id"]))
    victim.kill9()

    result = cluster.wait_finished(execution_id, timeout=90)
    assert result["status"] == "ok", result
    # the effect of the task that finished before the crash happened once
    assert effects.posts["/charge"] == 1
    assert list(effects.keys.values()) == [1]
    # the task running at the crash ran again, the rest once
    assert out.read_text().split() == ["slow", "slow", "last"]
    events = cluster.events(execution_id)
    reclaimed = [e for e in events if e["type"] == "task.reclaimed"]
    assert [e["payload"]["task_id"] for e in reclaimed] == [task_id]
    [processed] = [e for e in events if e["type"] == "tool.processed"]
    payload = processed["payload"]
    assert payload["ok"] is True
    assert payload["this"]["task"] == "last" and payload["this"]["posted"] == 1
    runs = [(t["task"], t["attempt"]) for t in payload["tasks"]]
    assert runs == [("post", 1), ("slow", 2), ("last", 2)]
    assert store.checkpoints.load(task_id) is None  # forgotten once the pipeline ended well
