"""Traces across real processes: a server and a worker on PostgreSQL, spans written by the
console exporter to each process's output. Nothing is sampled but what `noetl exec start
--trace` asks for, and that execution is one trace whatever process wrote its spans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from noetl.observability.trace_context import execution_span_id, trace_id_of
from tests.distributed.cluster import Cluster
from tests.helpers.cli import noetl
from tests.helpers.spans import CONSOLE_TRACING, console_spans, trace_hex

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: traced_distributed}
workflow:
  - step: first
    tool: {kind: python, code: "def main(context, args):\\n    return 1\\n"}
    result: {as: one}
    next: fan
  - step: fan
    loop: {collection: "{{ [1, 2, 3] }}", element: n, mode: parallel}
    tool: {kind: noop, args: {n: "{{ n }}"}}
    next: last
  - step: last
    tool: {kind: noop, args: {one: "{{ one }}"}}
"""


def exec_start(cluster: Cluster, playbook: Path, *extra: str) -> str:
    env = {"NOETL_SERVER_URL": cluster.url, "NOETL_API_TOKEN": cluster.token}
    proc = noetl("exec", "start", "--workflow", playbook, "--json", *extra, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["execution_id"])


def test_only_the_traced_execution_is_one_trace_across_processes(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.env = {**CONSOLE_TRACING, "NOETL_TRACING_SAMPLE_RATE": "0"}
    cluster.start_server()
    cluster.start_worker("w1")
    playbook = tmp_path / "traced.yaml"
    playbook.write_text(PLAYBOOK, encoding="utf-8")

    traced = exec_start(cluster, playbook, "--trace")
    plain = exec_start(cluster, playbook)
    for execution_id in (traced, plain):
        assert cluster.wait_finished(execution_id)["status"] == "ok"
    assert cluster.execution(traced)["workload"]["trace"] is True
    cluster.stop_all()  # each process exports what it still holds as it stops

    spans = console_spans("\n".join(proc.output() for proc in cluster.procs))
    assert {span["context"]["trace_id"] for span in spans} == {trace_hex(trace_id_of(traced))}
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(str(span["name"]), []).append(span)
    [root] = by_name["server.execution"]
    assert root["context"]["span_id"] == f"0x{execution_span_id(traced):016x}"
    assert root["parent_id"] is None
    assert len(by_name["server.dispatch"]) == 5
    dispatch_ids = {span["context"]["span_id"] for span in by_name["server.dispatch"]}
    assert {span["parent_id"] for span in by_name["server.dispatch"]} == {
        root["context"]["span_id"]
    }
    plugins = by_name["worker.plugin.noop"] + by_name["worker.plugin.python"]
    assert len(plugins) == 5
    assert {span["parent_id"] for span in plugins} == dispatch_ids
    services = {span["resource"]["attributes"]["service.name"] for span in spans}
    assert services == {"noetl-server", "noetl-worker"}
