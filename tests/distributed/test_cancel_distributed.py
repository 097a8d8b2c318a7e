"""Canceling an execution in distributed mode kills its running python code.

A worker with a 1.5 s lease heartbeats every 0.5 s; the heartbeat that answers `cancel`
makes it kill the child process running the task.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
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


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path) -> Iterator[Cluster]:
    cl = Cluster(db=pg_database, workdir=tmp_path)
    try:
        yield cl
    finally:
        cl.stop_all()


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
