"""A worker's own faults, with a real server and real worker processes: results a store
holds only with care (a NUL character, on PostgreSQL), results it refuses (NaN), and a
hard stop (a second SIGTERM) that hands the running tasks back at once."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from noetl.store import open_store
from noetl.store.base import TaskStatus
from tests.distributed.cluster import Cluster, wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]


class _Answers(ThreadingHTTPServer):
    """A loopback HTTP server that answers every GET with `body` as application/json."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.body = b"{}"
        self.delay = 0.0  # seconds before answering
        self.calls = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/answer"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Answers

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.calls += 1
        time.sleep(self.server.delay)
        data = self.server.body
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def answers() -> Iterator[_Answers]:
    server = _Answers()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(params=["postgres", "sqlite"])
def any_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "postgres":
        db = request.getfixturevalue("pg_database")
    else:
        db = str(tmp_path / "noetl.db")
    cl = Cluster(db=db, workdir=tmp_path)
    try:
        yield cl
    finally:
        cl.stop_all()


MAKE_NUL = """\
def main(context, args):
    open(args["ran"], "w").close()
    return {"s": "a\\x00b", "k\\x00": ["\\x00", "\\ufdd0", "\\ufdd00"]}
"""
CHECK_NUL = """\
def main(context, args):
    return {
        "made": args["made"]["s"] == "a\\x00b",
        "inner": args["made"]["k\\x00"] == ["\\x00", "\\ufdd0", "\\ufdd00"],
        "fetched": args["fetched"]["s"] == "x\\x00y",
        "s": args["made"]["s"],
    }
"""


def nul_playbook(url: str, ran: Path, sink: Path) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: nul}}
workflow:
  - step: start
    tool: {{kind: python, code: {json.dumps(MAKE_NUL)}, args: {{ran: "{ran}"}}}}
    result: {{as: made}}
    next: fetch
  - step: fetch
    tool: {{kind: http, method: GET, url: "{url}"}}
    result: {{as: fetched, pick: "{{{{ this.data }}}}"}}
    next: check
  - step: check
    tool:
      kind: python
      code: {json.dumps(CHECK_NUL)}
      args: {{made: "{{{{ made }}}}", fetched: "{{{{ fetched }}}}"}}
    result:
      as: checked
      sink:
        - file: {{path: "{sink}", format: json}}
"""


LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: plain}
workflow:
  - step: items
    loop: {collection: [1, 2, 3, 4], element: n, mode: parallel}
    tool: {kind: python, code: "def main(context, args):\\n    return args['n'] * 2\\n",
           args: {n: "{{ n }}"}}
    result: {collect: {into: doubled, mode: list}}
"""


def test_nul_characters_in_results_are_kept_and_the_worker_keeps_serving(
    any_cluster: Cluster, answers: _Answers, tmp_path: Path
) -> None:
    answers.body = b'{"s": "x\\u0000y"}'
    sink = tmp_path / "checked.json"
    any_cluster.env["NOETL_SINKS_FILE_ROOT"] = str(tmp_path)  # the worker writes the sink there
    any_cluster.start_server()
    worker = any_cluster.start_worker("w1", lease_s=10.0, concurrency=2)
    ran = tmp_path / "ran"
    nul_id = any_cluster.start_execution(nul_playbook(answers.url, ran, sink))
    # A NUL in the first result killed the worker's reporter: an unrelated execution run on
    # the same worker after it must still finish, and quickly.
    wait_until(ran.exists, 30, "the first step to run")
    started = time.monotonic()
    plain_id = any_cluster.start_execution(LOOP)
    plain = any_cluster.wait_finished(plain_id, timeout=30)
    assert plain["status"] == "ok", plain
    assert plain["context"]["doubled"] == [2, 4, 6, 8]
    assert time.monotonic() - started < 15

    result = any_cluster.wait_finished(nul_id, timeout=30)
    assert result["status"] == "ok", (result, worker.output()[-3000:])
    context = result["context"]
    assert context["made"] == {"s": "a\x00b", "k\x00": ["\x00", "\ufdd0", "\ufdd00"]}
    assert context["fetched"] == {"s": "x\x00y"}
    assert context["checked"] == {"made": True, "inner": True, "fetched": True, "s": "a\x00b"}
    finished = [e for e in any_cluster.events(nul_id) if e["type"] == "step.finished"]
    assert finished[0]["step"] == "start"
    assert finished[0]["payload"]["result"] == context["made"]
    assert json.loads(sink.read_text(encoding="utf-8"))["s"] == "a\x00b"
    assert worker.popen.poll() is None  # still serving


def fetch_playbook(url: str) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: refused}}
workflow:
  - step: fetch
    tool: {{kind: http, method: GET, url: "{url}"}}
    result: {{as: fetched}}
"""


def test_a_result_the_store_refuses_fails_its_task_and_the_worker_keeps_serving(
    cluster: Cluster, answers: _Answers
) -> None:
    # Python's json reads a lone surrogate, PostgreSQL's jsonb refuses it: the report cannot
    # be stored. (A NaN would not get this far: the worker refuses it as a result.)
    answers.body = b'{"v": "\\ud800"}'
    cluster.start_server()
    worker = cluster.start_worker("w1", lease_s=10.0, concurrency=2)
    refused_id = cluster.start_execution(fetch_playbook(answers.url))
    result = cluster.wait_finished(refused_id, timeout=30)
    assert result["status"] == "fail", result
    failed = [e for e in cluster.events(refused_id) if e["type"] == "step.finished"]
    error = failed[0]["payload"]["error"]
    assert "the worker could not report the task's result" in error, error
    assert "cannot store a value" in error, error
    events = cluster.events(refused_id)
    dead = [e for e in events if e["type"] == "task.dead_lettered"]
    assert len(dead) == 1 and dead[0]["payload"]["reason"] == "fatal", dead
    assert not [e for e in events if e["type"] == "retry.started"]

    started = time.monotonic()
    plain = cluster.wait_finished(cluster.start_execution(LOOP), timeout=30)
    assert plain["status"] == "ok", plain
    assert time.monotonic() - started < 15
    assert worker.popen.poll() is None
    assert "Traceback" not in worker.output()


ONCE_SLOW = """\
import os
import time
from pathlib import Path
def main(context, args):
    marker = Path(args["marker"])
    if marker.exists():
        return {"run": "again", "first": marker.read_text()}
    marker.write_text(str(os.getpid()))
    time.sleep(120)
    return {"run": "first"}
"""


def once_slow_playbook(marker: Path) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: once_slow}}
workflow:
  - step: slow
    tool:
      kind: python
      code: {json.dumps(ONCE_SLOW)}
      args: {{marker: "{marker}"}}
    result: {{as: ran}}
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_second_sigterm_stops_the_worker_at_once_and_hands_its_task_back(
    any_cluster: Cluster, tmp_path: Path
) -> None:
    lease_s = 60.0  # the task must not wait for this
    marker = tmp_path / "marker"
    any_cluster.start_server()
    first = any_cluster.start_worker("first", lease_s=lease_s, concurrency=1)
    execution_id = any_cluster.start_execution(once_slow_playbook(marker))
    task_id = f"{execution_id}.slow"
    wait_until(lambda: marker.exists() and marker.read_text() != "", 30, "the task to start")
    child = int(marker.read_text())
    store = open_store(any_cluster.db)
    try:
        row = store.get_task(task_id)
        assert row is not None and f":{first.pid}:" in str(row["worker_id"])
        second = any_cluster.start_worker("second", lease_s=lease_s, concurrency=1)

        first.signal(signal.SIGTERM)  # drains: the task would run on for two minutes
        time.sleep(0.5)
        assert first.popen.poll() is None
        signaled = time.monotonic()
        first.signal(signal.SIGTERM)  # stops now
        assert first.popen.wait(timeout=10) == 0, first.output()
        stopped_in = time.monotonic() - signaled
        assert stopped_in < 5, (stopped_in, first.output())
        assert "1 handed back" in first.output(), first.output()
        wait_until(lambda: not _alive(child), 5, "the task's python child to be killed")

        result = any_cluster.wait_finished(execution_id, timeout=30)
        handed_over_in = time.monotonic() - signaled
        assert result["status"] == "ok", result
        assert result["context"]["ran"] == {"run": "again", "first": str(child)}
        assert handed_over_in < lease_s / 3, handed_over_in  # well before the lease ran out
        row = store.get_task(task_id)
        assert row is not None and row["status"] == TaskStatus.DONE
        assert f":{second.pid}:" in str(row["worker_id"])
        assert row["attempt"] == 1  # handed back, not lost: no attempt used
        events = any_cluster.events(execution_id)
        assert not [e for e in events if e["type"] == "task.reclaimed"]
        assert [e["type"] for e in events].count("tool.processed") == 1
        statuses = {w.worker_id.split(":")[1]: w.status for w in store.list_workers()}
        assert statuses[str(first.pid)] == "stopped"
    finally:
        store.close()


def test_a_second_sigterm_does_not_wait_for_a_tool_that_cannot_be_interrupted(
    cluster: Cluster, answers: _Answers
) -> None:
    answers.delay = 60.0  # an HTTP call that holds its task thread for a minute
    answers.body = b'{"late": true}'
    cluster.start_server()
    worker = cluster.start_worker("w1", lease_s=60.0, concurrency=1)
    execution_id = cluster.start_execution(fetch_playbook(answers.url))
    wait_until(lambda: answers.calls == 1, 30, "the HTTP call to start")
    worker.signal(signal.SIGTERM)
    time.sleep(0.5)
    signaled = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.popen.wait(timeout=10) == 0, worker.output()
    assert time.monotonic() - signaled < 5, worker.output()
    store = open_store(cluster.db)
    try:
        row = store.get_task(f"{execution_id}.fetch")
        assert row is not None
        assert (row["status"], row["worker_id"]) == (TaskStatus.QUEUED, None)
    finally:
        store.close()
