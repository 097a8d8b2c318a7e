"""Templates on a real server and worker over PostgreSQL.

* Runaway templates (a huge integer power, a 2 GB `center`, nested loops, ...) fail their
  steps at once with the limit they break, and the server stays responsive: `/health`
  answers within a second throughout, an unrelated execution finishes on time, and a
  runaway met by the orchestrator after a restart (from an input waiting in the inbox)
  neither holds it again nor keeps executions from being canceled. Before the render
  limits, `(10 ** 10000) ** 10000` alone held the server's interpreter lock for minutes,
  in the API request that started the execution, and again after every restart.
* Keys named like dict methods (`items`, `keys`, `values`, `get`, ...) read as data on the
  server (gates, args, pick, loop collections, case) and on workers (sink args).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.distributed.cluster import Cluster, wait_until
from tests.helpers.template_playbooks import (
    DATA_CONTEXT,
    DATA_SINK_BODY,
    DATA_SINK_FILE,
    DATA_WORKLOAD,
    INT,
    QUICK,
    data_first_playbook,
    runaway_after_failure_playbook,
    runaway_errors,
    runaway_playbook,
)

pytestmark = [pytest.mark.services, pytest.mark.slow]


class HealthProbe:
    """Asks `/health` every 50 ms (with a generous timeout, so a slow answer is measured
    rather than cut off) while it is on; records how long each answer took."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.latencies: list[float] = []
        self.asked_at: list[float] = []  # when each answered request was sent
        self.failures: list[str] = []
        self.on = threading.Event()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthProbe:
        self.on.set()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.on.set()
        self.thread.join(timeout=30)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stopped.is_set():
                self.on.wait()
                if self.stopped.is_set():
                    return
                started = time.monotonic()
                try:
                    status = client.get(f"{self.cluster.url}/health").status_code
                except httpx.HTTPError as exc:
                    if self.on.is_set():  # not paused meanwhile (for a restart)
                        self.failures.append(repr(exc))
                else:
                    if self.on.is_set():
                        self.latencies.append(time.monotonic() - started)
                        self.asked_at.append(started)
                        if status != 200:
                            self.failures.append(f"status {status}")
                time.sleep(0.05)


def _inbox_rows(db: str, execution_id: str) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT count(*) FROM inbox WHERE execution_id = %s", (execution_id,)
        ).fetchone()
    return int(row[0]) if row else 0


def test_runaway_templates_never_hold_the_server(
    cluster: Cluster, tmp_path: Path, pg_database: str
) -> None:
    cluster.start_server()
    cluster.start_worker("w1", concurrency=2)
    with HealthProbe(cluster) as probe:
        # Every runaway step is rendered in the API request that starts the execution.
        asked = time.monotonic()
        runaway = cluster.start_execution(runaway_playbook())
        answered = time.monotonic()
        quick = cluster.start_execution(QUICK, {"n": 3})
        assert answered - asked < 10
        done = cluster.wait_finished(quick, timeout=30)
        assert done["status"] == "ok"
        assert done["context"]["second"] == {"n": 8}
        result = cluster.wait_finished(runaway, timeout=10)
        for step, error in runaway_errors().items():
            assert result["steps"][step] == {"status": "failed", "error": error}, step

        # A runaway the orchestrator meets after a restart, from an input that waited in
        # the inbox while the server was down.
        started, go = tmp_path / "started", tmp_path / "go"
        later = cluster.start_execution(
            runaway_after_failure_playbook(), {"started": str(started), "go": str(go)}
        )
        wait_until(started.exists, 30, "the first step to run")
        probe.on.clear()
        cluster.procs[0].stop()
        go.touch()
        wait_until(lambda: _inbox_rows(pg_database, later) > 0, 30, "the failure in the inbox")
        cluster.start_server(port=cluster.port, name="server2")
        probe.on.set()
        result = cluster.wait_finished(later, timeout=30)
        assert result["status"] == "fail"
        assert result["steps"]["start"]["status"] == "failed"
        assert result["steps"]["bomb"] == {"status": "failed", "error": f"tool: args.v: {INT}"}

        # The restarted server still cancels what it runs, and still runs what it is given.
        started.unlink()
        never = tmp_path / "never"
        pending = cluster.start_execution(
            runaway_after_failure_playbook(), {"started": str(started), "go": str(never)}
        )
        wait_until(started.exists, 30, "the first step to run again")
        response = httpx.post(
            f"{cluster.url}/api/executions/{pending}/cancel", headers=cluster.headers, timeout=10
        )
        assert response.status_code < 300, response.text
        assert cluster.wait_finished(pending, timeout=30)["status"] == "canceled"
        quick = cluster.start_execution(QUICK, {"n": 1})
        assert cluster.wait_finished(quick, timeout=30)["context"]["second"] == {"n": 4}
    assert probe.failures == []
    # `/health` was asked while the server rendered the runaways (a second of steps for
    # the nested loops alone), and answered within a second every time.
    assert any(asked <= t < answered for t in probe.asked_at), (asked, answered)
    assert max(probe.latencies) < 1.0, sorted(probe.latencies)[-5:]


def test_keys_named_like_dict_methods_are_data_on_server_and_worker(
    cluster: Cluster, tmp_path: Path, pg_database: str
) -> None:
    cluster.env["NOETL_SINKS_FILE_ROOT"] = str(tmp_path)  # the sink writes under tmp_path
    cluster.start_server()
    cluster.start_worker("w1", concurrency=2)
    out_dir = tmp_path / "out"
    execution_id = cluster.start_execution(data_first_playbook(str(out_dir)), DATA_WORKLOAD)
    result = cluster.wait_finished(execution_id, timeout=60)
    assert result["status"] == "ok", json.dumps(result)
    # The saved context as stored (the API masks keys that look sensitive, such as `keys`).
    with psycopg.connect(pg_database) as conn:
        row = conn.execute(
            "SELECT context FROM execution WHERE execution_id = %s", (execution_id,)
        ).fetchone()
    assert row is not None
    assert {k: v for k, v in row[0].items() if k in DATA_CONTEXT} == DATA_CONTEXT
    assert {name: s["status"] for name, s in result["steps"].items()} == {
        "start": "ok",
        "each": "ok",
        "decide": "ok",
    }
    assert json.loads((out_dir / DATA_SINK_FILE).read_text()) == DATA_SINK_BODY
