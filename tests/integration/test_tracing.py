"""Traces of real runs: an orchestrator and a worker (threads over one SQLite file or a fresh
PostgreSQL database), the embedded runtime, and the http tool against a loopback server
that records the `traceparent` it receives. Spans go to the SDK's in-memory exporter."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from noetl.core import ExecutionStatus
from noetl.decision.decider import Decider
from noetl.dsl import load_playbook_text
from noetl.observability import observer_for
from noetl.observability.trace_context import (
    TraceSampler,
    execution_span_id,
    parse_traceparent,
    trace_id_of,
)
from noetl.observability.tracing import Tracing
from noetl.runtime.local import embedded_runtime
from noetl.runtime.orchestrator import Orchestrator
from noetl.store.base import Store
from noetl.tools.http import HttpTool
from noetl.worker.runner import Worker, WorkerConfig
from noetl.worker.tools import NoopTool, ToolRegistry
from tests.helpers.loopback import base_url, serving

VALUE = "value-canary-91ab"  # workload data: it must never reach a span

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: traced, path: tests/traced}}
workload: {{word: {value}}}
workflow:
  - step: start
    tool: {{kind: noop, args: {{word: "{{{{ workload.word }}}}", n: 1}}}}
    result:
      as: first
      sink:
        - duckdb: {{table: firsts, database: "{duckdb}", mode: insert}}
    next: items
  - step: items
    loop: {{collection: "{{{{ [1, 2, 3] }}}}", element: n, mode: parallel}}
    tool: {{kind: noop, args: {{n: "{{{{ n }}}}", word: "{{{{ workload.word }}}}"}}}}
    result: {{collect: {{into: xs, mode: list}}}}
    next:
      - step: call
        when: "{{{{ xs | length == 3 }}}}"
  - step: call
    when: "{{{{ first.n == 1 }}}}"
    tool: {{kind: http, url: "{url}/{path}"}}
    result: {{as: called}}
"""


class Recorder(BaseHTTPRequestHandler):
    """Records the traceparent of each request; /missing answers 404."""

    seen: list[str | None] = []

    def do_GET(self) -> None:
        Recorder.seen.append(self.headers.get("traceparent"))
        status = 404 if self.path.startswith("/missing") else 200
        body = b'{"ok": true}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_url() -> Iterator[str]:
    Recorder.seen = []
    with serving(Recorder) as server:
        yield base_url(server)


class TracedCluster:
    """An orchestrator and a worker (which continues executions) as threads over one
    store; each writes spans through its own tracing, into one in-memory exporter."""

    def __init__(self, store: Store, sampler: TraceSampler) -> None:
        self.store = store
        self.spans = InMemorySpanExporter()
        server = Tracing(SimpleSpanProcessor(self.spans), sampler=sampler, service="server")
        worker = Tracing(SimpleSpanProcessor(self.spans), sampler=sampler, service="worker")
        server_observer = observer_for(logs=False, tracing=server, load_events=store.load_events)
        worker_observer = observer_for(logs=False, tracing=worker, load_events=store.load_events)
        self.orchestrator = Orchestrator(
            store, owner="server", observer=server_observer, sampler=sampler
        )
        self.worker = Worker(
            store,
            ToolRegistry([NoopTool(), HttpTool()], observer=worker_observer),
            WorkerConfig(concurrency=2, poll_s=0.02, worker_id="w1"),
            decider=Decider(store, observer=worker_observer, sampler=sampler),
            observer=worker_observer,
        )
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(
                target=self.orchestrator.serve, args=(self.stop.is_set,), kwargs={"idle_wait": 0.02}
            ),
            threading.Thread(target=self.worker.run, args=(self.stop.is_set,)),
        ]
        for thread in self.threads:
            thread.start()

    def run(self, text: str, workload: dict[str, Any] | None = None, *, root: bool = True) -> str:
        """Run an execution to its end; with `root`, until its root span is written too
        (the process that commits the end writes it right after the commit)."""
        execution_id = self.orchestrator.start_execution(text, workload=workload)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            record = self.store.get_execution(execution_id)
            done = record is not None and record.status.terminal
            if done and (not root or self.has_root(execution_id)):
                return execution_id
            time.sleep(0.01)
        raise AssertionError(f"execution {execution_id} did not finish")

    def has_root(self, execution_id: str) -> bool:
        return any(
            s.name == "server.execution" and s.context.trace_id == trace_id_of(execution_id)
            for s in self.spans.get_finished_spans()
        )

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=10)


@pytest.fixture
def cluster(store: Store) -> Iterator[TracedCluster]:
    cl = TracedCluster(store, TraceSampler(1.0))
    yield cl
    cl.close()


def playbook(tmp_path: Path, url: str, path: str = "ok") -> str:
    return PLAYBOOK.format(value=VALUE, duckdb=tmp_path / "sink.duckdb", url=url, path=path)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def service(span: ReadableSpan) -> str:
    return str(span.resource.attributes["service.name"])


def test_one_trace_spans_server_and_worker(
    cluster: TracedCluster, tmp_path: Path, http_url: str
) -> None:
    execution_id = cluster.run(playbook(tmp_path, http_url))
    record = cluster.store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK, record
    spans = cluster.spans.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {trace_id_of(execution_id)}
    ids = {s.context.span_id: s for s in spans}
    assert len(ids) == len(spans)  # no span written twice

    [root] = [s for s in spans if s.name == "server.execution"]
    assert root.parent is None and root.context.span_id == execution_span_id(execution_id)
    assert attrs(root)["workflow_ref"] == "tests/traced"
    assert attrs(root)["workload_size"] > 0

    dispatches = [s for s in spans if s.name == "server.dispatch"]
    assert sorted((attrs(s)["step_id"], attrs(s).get("loop_index", -1)) for s in dispatches) == [
        ("call", -1), ("items", 0), ("items", 1), ("items", 2), ("start", -1)
    ]  # fmt: skip
    assert all(parent_id(s) == root.context.span_id for s in dispatches)
    # Decisions were committed by the server (the fan-out) and by the worker (the chain).
    assert {service(s) for s in dispatches} == {"server", "worker"}

    plugins = [s for s in spans if s.name.startswith("worker.plugin.")]
    assert sorted(s.name for s in plugins) == ["worker.plugin.http"] + ["worker.plugin.noop"] * 4
    dispatch_ids = {s.context.span_id for s in dispatches}
    for plugin in plugins:
        assert service(plugin) == "worker"
        dispatch = ids[parent_id(plugin) or 0]
        assert dispatch.context.span_id in dispatch_ids
        assert attrs(dispatch)["message_id"] == attrs(plugin)["message_id"]
        assert attrs(plugin)["attempt"] == 1
        assert attrs(plugin)["args_signature"].startswith("{")

    [sink] = [s for s in spans if s.name.startswith("worker.sink.")]
    assert sink.name == "worker.sink.duckdb_0"
    start_dispatch = next(s for s in dispatches if attrs(s)["step_id"] == "start")
    assert parent_id(sink) == start_dispatch.context.span_id
    assert {k: attrs(sink)[k] for k in ("sink_type", "table", "mode", "rows_written")} == {
        "sink_type": "duckdb",
        "table": "firsts",
        "mode": "insert",
        "rows_written": 1,
    }

    routes = sorted(
        (attrs(s)["from_step"], attrs(s)["target_step"], attrs(s).get("condition"))
        for s in spans
        if s.name == "server.route"
    )
    assert routes == [("items", "call", "{{ xs | length == 3 }}"), ("start", "items", None)]
    assert all(parent_id(s) == root.context.span_id for s in spans if s.name == "server.route")
    [gate] = [s for s in spans if s.name == "server.when_eval"]
    call_dispatch = next(s for s in dispatches if attrs(s)["step_id"] == "call")
    assert attrs(gate)["outcome"] == "true"
    assert parent_id(gate) == call_dispatch.context.span_id

    everything = str([(s.name, attrs(s), [e.attributes for e in s.events]) for s in spans])
    assert VALUE not in everything  # shapes and names, never payloads

    # The http call carried the trace onward: the execution's trace, the plugin's span.
    [http] = [s for s in plugins if s.name == "worker.plugin.http"]
    assert [parse_traceparent(t) for t in Recorder.seen] == [
        (trace_id_of(execution_id), http.context.span_id)
    ]


def test_sampling_across_processes(store: Store, tmp_path: Path, http_url: str) -> None:
    cluster = TracedCluster(store, TraceSampler(0.0))
    try:
        quiet = cluster.run(playbook(tmp_path, http_url), root=False)
        time.sleep(0.1)  # a span written after the commit would be there by now
        assert cluster.spans.get_finished_spans() == ()
        # Not traced, so the http tool sent a traceparent of its own, not the execution's.
        [untraced] = [parse_traceparent(t) for t in Recorder.seen]
        assert untraced is not None and untraced[0] != trace_id_of(quiet)

        forced = cluster.run(playbook(tmp_path, http_url), {"trace": True})
        spans = cluster.spans.get_finished_spans()
        assert {s.context.trace_id for s in spans} == {trace_id_of(forced)}
        assert {"server.execution", "worker.plugin.http", "worker.sink.duckdb_0"} <= {
            s.name for s in spans
        }

        # A failure (a 404 is final) is traced although not sampled: rebuilt from the log.
        cluster.spans.clear()
        failed = cluster.run(playbook(tmp_path, http_url, path="missing"))
        spans = cluster.spans.get_finished_spans()
        assert {s.context.trace_id for s in spans} == {trace_id_of(failed)}
        [root] = [s for s in spans if s.name == "server.execution"]
        assert root.status.status_code is StatusCode.ERROR
        [http] = [s for s in spans if s.name == "worker.plugin.http"]
        assert http.status.status_code is StatusCode.ERROR
        assert attrs(http)["noetl.reconstructed"] is True
        assert "404" in str(http.status.description)
    finally:
        cluster.close()


def test_the_embedded_runtime_writes_one_trace(tmp_path: Path) -> None:
    exported = InMemorySpanExporter()
    sampler = TraceSampler(1.0)
    tracing = Tracing(SimpleSpanProcessor(exported), sampler=sampler, service="run")
    text = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: embedded}
workflow:
  - step: a
    tool: {kind: python, code: "def main(context, args):\\n    return args['n'] + 1\\n",
           args: {n: 1}}
    result: {as: x}
    next: b
  - step: b
    tool: {kind: noop, args: {x: "{{ x }}"}}
"""
    with embedded_runtime(
        str(tmp_path / "run.db"), workers=1, tracing=tracing, sampler=sampler
    ) as runtime:
        result = runtime.run(load_playbook_text(text).require(), source_text=text)
    assert result.status is ExecutionStatus.OK
    spans = exported.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {trace_id_of(result.execution_id)}
    names = sorted(s.name for s in spans)
    assert names == [
        "server.dispatch",
        "server.dispatch",
        "server.execution",
        "server.route",
        "worker.plugin.noop",
        "worker.plugin.python",
    ]
    ids = {s.context.span_id: s.name for s in spans}
    for span in spans:
        if span.name.startswith("worker.plugin."):
            assert ids[parent_id(span) or 0] == "server.dispatch"
