"""Canceling an execution in distributed mode kills its running python code.

A worker with a 1.5 s lease heartbeats every 0.5 s; the heartbeat that answers `cancel`
makes it kill the child process running the task.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest

from tests.distributed.cluster import Cluster, wait_until

pytestmark = [pytest.mark.services, pytest.mark.slow]

SLEEPER = """\
import os
import time
def main(context, args):
    with open(args["out"], "a") as fh:
        fh.write(f"started {os.getpid()}\\n")
    time.sleep(30)
    with open(args["out"], "a") as fh:
        fh.write("finished\\n")
"""

PLAYBOOK = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: sleeper}}
workflow:
  - step: sleep
    tool:
      kind: python
      code: {json.dumps(SLEEPER)}
      args: {{out: "{{{{ workload.out }}}}"}}
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cancel_kills_the_running_python_task(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    cluster.start_server()
    cluster.start_worker("w1", lease_s=1.5, concurrency=1)
    execution_id = cluster.start_execution(PLAYBOOK, {"out": str(out)})
    wait_until(lambda: out.exists() and "started" in out.read_text(), 30, "the task to start")
    pid = int(out.read_text().split()[1])
    assert alive(pid)

    canceled_at = time.monotonic()
    response = httpx.post(
        f"{cluster.url}/api/executions/{execution_id}/cancel", headers=cluster.headers, timeout=30
    )
    assert response.status_code < 300, response.text
    wait_until(lambda: not alive(pid), 1.0, "the python child to be killed", interval=0.02)
    result = cluster.wait_finished(execution_id, timeout=5)
    assert result["status"] == "canceled"
    assert time.monotonic() - canceled_at < 1.0 + 0.2  # two heartbeats, and one status poll
    assert "finished" not in out.read_text()


ITEM = """\
import os
import time
from pathlib import Path
def main(context, args):
    marker = Path(args["dir"]) / f"{args['i']}.txt"
    marker.write_text(f"started {os.getpid()}\\n")
    time.sleep(20)
    with marker.open("a") as fh:
        fh.write("finished\\n")
"""

BIG_LOOP = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: big_loop}}
workflow:
  - step: items
    loop:
      collection: "{{{{ range(10000) | list }}}}"
      element: i
      mode: parallel
      max_concurrency: 6
    tool:
      kind: python
      code: {json.dumps(ITEM)}
      args: {{dir: "{{{{ workload.dir }}}}", i: "{{{{ i }}}}"}}
"""


def test_cancel_stops_a_running_10000_item_loop_within_two_heartbeats(
    cluster: Cluster, tmp_path: Path, pg_database: str
) -> None:
    import psycopg

    markers = tmp_path / "items"
    markers.mkdir()
    cluster.start_server()
    lease_s = 1.5  # heartbeats every 0.5 s
    cluster.start_worker("w1", lease_s=lease_s, concurrency=6)
    execution_id = cluster.start_execution(BIG_LOOP, {"dir": str(markers)})
    wait_until(lambda: len(list(markers.iterdir())) >= 6, 30, "six items to run")

    def running_pids() -> list[int]:
        pids = []
        for marker in markers.iterdir():
            words = marker.read_text().split()
            if len(words) >= 2 and alive(int(words[1])):
                pids.append(int(words[1]))
        return pids

    assert len(running_pids()) == 6
    canceled_at = time.monotonic()
    response = httpx.post(
        f"{cluster.url}/api/executions/{execution_id}/cancel", headers=cluster.headers, timeout=30
    )
    assert response.status_code < 300, response.text
    wait_until(lambda: not running_pids(), 1.0, "every running item to be stopped", 0.02)
    stopped_after = time.monotonic() - canceled_at
    assert stopped_after < 2 * (lease_s / 3) + 0.2, stopped_after  # two heartbeats
    result = cluster.wait_finished(execution_id, timeout=10)
    assert result["status"] == "canceled"
    assert result["steps"]["items"]["completed"] < 10000

    events = cluster.events(execution_id)
    cancel_seq = next(e["seq"] for e in events if e["type"] == "workflow.cancel_requested")
    dispatched = [e for e in events if e["type"] == "loop.iteration.started"]
    assert dispatched and all(e["seq"] < cancel_seq for e in dispatched)
    with psycopg.connect(pg_database) as conn:
        rows = conn.execute(
            "SELECT status, count(*) FROM task_queue WHERE execution_id = %s GROUP BY status",
            (execution_id,),
        ).fetchall()
    statuses = dict(rows)
    # every task row was dispatched before the cancel, and none is queued or leased now
    assert sum(statuses.values()) == len(dispatched)
    assert "queued" not in statuses and "leased" not in statuses
    assert not any("finished" in m.read_text() for m in markers.iterdir())
    assert len(list(markers.iterdir())) <= len(dispatched)
