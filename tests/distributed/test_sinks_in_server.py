"""`sinks.in_worker: false` (NOETL_EXECUTE_SINKS_IN_WORKER=false) with real processes on
PostgreSQL: the worker runs each tool, the server's own sink runner writes the results,
under the server's file root and never the worker's."""

from __future__ import annotations

import json
from pathlib import Path

from tests.distributed.cluster import Cluster, wait_until

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sinks_in_server}
workload: {n: 4}
workflow:
  - step: start
    next: [{step: fan}]
  - step: fan
    loop: {in: "{{ range(workload.n) | list }}", iterator: i}
    tool:
      kind: python
      spec:
        code: |
          import os
          def main(context, args):
              return {"i": args["i"], "ran_under": os.environ.get("NOETL_SINKS_FILE_ROOT")}
      args: {i: "{{ i }}"}
    result:
      sink:
        - kind: file
          spec: {path: "item{{ i }}.json", format: json}
    next: [{step: end}]
  - step: end
"""


def test_the_server_writes_what_the_worker_computed(cluster: Cluster, tmp_path: Path) -> None:
    server_root, worker_root = tmp_path / "server", tmp_path / "worker"
    server_root.mkdir()
    worker_root.mkdir()
    flag = {"NOETL_EXECUTE_SINKS_IN_WORKER": "false"}
    cluster.env = {**flag, "NOETL_SINKS_FILE_ROOT": str(server_root)}
    server = cluster.start_server()
    wait_until(lambda: "sinks run here: pool server-sinks" in server.output(), 10, "runner")
    cluster.env = {**flag, "NOETL_SINKS_FILE_ROOT": str(worker_root)}
    cluster.start_worker("w1")

    execution_id = cluster.start_execution(PLAYBOOK)
    result = cluster.wait_finished(execution_id, timeout=90)

    assert result["status"] == "ok", result
    for i in range(4):
        written = json.loads((server_root / f"item{i}.json").read_text())
        assert written == {"i": i, "ran_under": str(worker_root)}
    assert list(worker_root.iterdir()) == []
    events = cluster.events(execution_id)
    handed = [e for e in events if e["type"] == "sink.started"]
    assert sorted(e["payload"]["index"] for e in handed) == [0, 1, 2, 3]
    writes = [
        e["payload"]
        for e in events
        if e["type"] == "tool.processed" and e["payload"]["task_id"].endswith(".sinks")
    ]
    assert len(writes) == 4 and all(w["sinks"][0]["status"] == "ok" for w in writes)
