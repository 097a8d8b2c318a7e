"""Spans derived from committed events and worker hooks (no I/O: the pure engine, the SDK's
in-memory exporter behind a synchronous processor)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from engine_harness import Harness, TaskFailure
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from noetl.core import Decision, Outcome, Task
from noetl.observability.trace_context import (
    TraceSampler,
    dispatch_span_id,
    execution_span_id,
    plugin_span_id,
    sink_span_id,
    trace_id_of,
)
from noetl.observability.tracing import MAX_TEXT, Tracing, clean
from noetl.observability.tracing_observer import TracingObserver
from noetl.redaction import SECRET_VALUES, signature_of

VALUE = "value-canary-5d1e"  # a payload value: it must never reach a span
FLOW = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: flow, path: tests/flow}}
workflow:
  - step: start
    tool: {{kind: noop, args: {{word: {VALUE}}}}}
    next:
      - step: items
      - step: gated
      - step: nowhere
        when: "{{{{ false }}}}"
  - step: items
    loop: {{collection: "{{{{ [1, 2, 3] }}}}", element: n, mode: parallel}}
    tool: {{kind: python, code: pass, args: {{n: "{{{{ n }}}}"}}}}
  - step: gated
    when: "{{{{ done('items') }}}}"
    tool: {{kind: noop}}
    next: broken
  - step: nowhere
    tool: {{kind: noop}}
  - step: broken
    tool: {{kind: python, code: pass}}
"""


@dataclass
class Traced(Harness):
    """The harness, with every decision committed to an observer."""

    observer: TracingObserver | None = None

    def _absorb(self, decision: Decision) -> Decision:
        result = super()._absorb(decision)
        if self.observer is not None:
            self.observer.committed(self.engine.graph, self.state, decision.events)
        return result


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def observer_of(
    exporter: SpanExporter, sampler: TraceSampler, harness: Harness | None = None
) -> TracingObserver:
    tracing = Tracing(SimpleSpanProcessor(exporter), sampler=sampler, service="test")
    load = None if harness is None else (lambda execution_id: list(harness.events))
    return TracingObserver(tracing, load_events=load, clock=lambda: 1_000.0)


def run_flow(
    exporter: InMemorySpanExporter,
    sampler: TraceSampler,
    *,
    workload: dict[str, Any] | None = None,
    fail: bool = True,
) -> Traced:
    h = Traced.from_text(FLOW, workload=workload)
    h.observer = observer_of(exporter, sampler, h)

    def broken(task: Task) -> Any:
        if fail:
            raise TaskFailure("boom: the service said no", "ValueError")
        return 1

    h.handlers = {"items": lambda task: task.index, "broken": broken}
    h.start()
    h.run()
    return h


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def test_one_trace_per_execution_with_the_span_model(exporter: InMemorySpanExporter) -> None:
    h = run_flow(exporter, TraceSampler(1.0))
    assert h.status.value == "fail"
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {trace_id_of("e1")}
    root = execution_span_id("e1")

    [execution] = by_name(spans, "server.execution")
    assert execution.context.span_id == root and execution.parent is None
    assert attrs(execution)["execution_id"] == "e1"
    assert attrs(execution)["workflow_ref"] == "tests/flow"
    assert attrs(execution)["workload_size"] == 2  # "{}"
    assert execution.status.status_code is StatusCode.ERROR
    [exception] = execution.events
    assert exception.name == "exception"
    assert "step 'broken' failed" in str((exception.attributes or {})["exception.message"])

    dispatches = by_name(spans, "server.dispatch")
    tasks = {t.task_id: t for t in h.dispatched}
    assert sorted(s.context.span_id for s in dispatches) == sorted(
        dispatch_span_id(task_id) for task_id in tasks
    )
    for span in dispatches:
        assert parent_id(span) == root
        task = tasks[attrs(span)["message_id"]]
        assert attrs(span)["step_id"] == task.step
        assert attrs(span)["tool_kind"] == task.kind
        assert attrs(span).get("loop_index") == task.index
        assert span.end_time == 1_000 * 10**9  # from the decision to its commit
    assert sorted(attrs(s).get("loop_index", -1) for s in dispatches) == [-1, -1, -1, 0, 1, 2]

    routes = {(attrs(s)["from_step"], attrs(s)["target_step"]): s for s in spans
              if s.name == "server.route"}  # fmt: skip
    assert set(routes) == {("start", "items"), ("start", "gated"), ("gated", "broken")}
    assert all(parent_id(s) == root for s in routes.values())
    assert attrs(routes[("start", "gated")])["edge_index"] == 1
    assert "condition" not in attrs(routes[("start", "items")])  # the edge has none

    gates = by_name(spans, "server.when_eval")
    outcomes = sorted((attrs(s)["step_id"], attrs(s)["outcome"]) for s in gates)
    assert outcomes == [("gated", "false"), ("gated", "true")]
    woken = next(s for s in gates if attrs(s)["outcome"] == "true")
    assert attrs(woken)["when_expr"] == "{{ done('items') }}"
    gated_task = next(t for t in h.dispatched if t.step == "gated")
    assert parent_id(woken) == dispatch_span_id(gated_task.task_id)
    parked = next(s for s in gates if attrs(s)["outcome"] == "false")
    assert parent_id(parked) == root
    # Shapes and names only: no payload value anywhere.
    assert VALUE not in str([attrs(s) for s in spans])


def test_worker_spans_are_children_of_the_dispatch_span(exporter: InMemorySpanExporter) -> None:
    observer = observer_of(exporter, TraceSampler(1.0))
    h = Traced.from_text(FLOW)
    h.start()
    task = TraceSampler(1.0).stamp(h.task("start"))
    observer.tool_started(task)
    observer.tool_finished(task, Outcome(task.task_id, ok=True, this={"word": VALUE}), 0.25)
    [plugin] = exporter.get_finished_spans()
    assert plugin.name == "worker.plugin.noop"
    assert plugin.context.trace_id == trace_id_of("e1")
    assert plugin.context.span_id == plugin_span_id(task.task_id, 1)
    assert parent_id(plugin) == dispatch_span_id(task.task_id)
    assert attrs(plugin)["spec_signature"] == signature_of(task.spec)
    assert attrs(plugin)["args_signature"] == "{word:str}"
    assert attrs(plugin)["attempt"] == 1
    assert (plugin.end_time or 0) - (plugin.start_time or 0) == 250_000_000
    assert VALUE not in str(attrs(plugin))

    sink = {"id": "rows", "kind": "duckdb", "spec": {"table": "t", "database": "/d.db"}}
    summary = {"id": "rows", "kind": "duckdb", "status": "ok", "table": "t", "mode": "upsert",
               "rows": 3, "attempts": 1, "duration_ms": 5.0}  # fmt: skip
    observer.sink_finished(task, sink, summary)
    failed = {**summary, "id": "copy", "status": "failed", "error": "disk full", "rows": None}
    observer.sink_finished(task, {**sink, "id": "copy"}, failed)
    written, broken = exporter.get_finished_spans()[1:]
    assert written.name == "worker.sink.rows"
    assert written.context.span_id == sink_span_id(task.task_id, 1, "rows")
    assert parent_id(written) == dispatch_span_id(task.task_id)
    assert {k: attrs(written)[k] for k in ("sink_type", "table", "mode", "rows_written")} == {
        "sink_type": "duckdb",
        "table": "t",
        "mode": "upsert",
        "rows_written": 3,
    }
    assert broken.status.status_code is StatusCode.ERROR
    assert "rows_written" not in attrs(broken)

    untraced = h.task("start")
    observer.tool_finished(untraced, Outcome(untraced.task_id, ok=True), 0.1)
    observer.sink_finished(untraced, sink, summary)
    assert len(exporter.get_finished_spans()) == 3  # a task without a trace adds nothing


@pytest.fixture
def secret() -> Iterator[str]:
    value = "sekret-canary-77f1"
    SECRET_VALUES.remember(value)
    yield value
    SECRET_VALUES.clear()


def test_errors_are_recorded_masked(exporter: InMemorySpanExporter, secret: str) -> None:
    observer = observer_of(exporter, TraceSampler(1.0))
    h = Traced.from_text(FLOW)
    h.start()
    task = TraceSampler(1.0).stamp(h.task("start"))
    error = f"login with {secret} failed at postgresql://ada:pw9@db/x"
    observer.tool_finished(
        task, Outcome(task.task_id, ok=False, error=error, error_type="AuthError"), 0.01
    )
    [span] = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    [event] = span.events
    message = str((event.attributes or {})["exception.message"])
    assert message == "login with *** failed at postgresql://ada:***@db/x"
    assert (event.attributes or {})["exception.type"] == "AuthError"
    assert secret not in str(span.status.description)
    assert len(clean("x" * 5000)) == MAX_TEXT


def test_sample_rate_zero_exports_nothing_and_trace_true_forces_it(
    exporter: InMemorySpanExporter,
) -> None:
    never = TraceSampler(0.0, force_on_error=False)
    run_flow(exporter, never)
    assert exporter.get_finished_spans() == ()
    run_flow(exporter, never, workload={"trace": True})
    names = {s.name for s in exporter.get_finished_spans()}
    assert {"server.execution", "server.dispatch", "server.route"} <= names


def test_a_failed_execution_is_traced_from_its_log_when_not_sampled(
    exporter: InMemorySpanExporter,
) -> None:
    run_flow(exporter, TraceSampler(0.0), fail=False)
    assert exporter.get_finished_spans() == ()  # ok and not sampled: nothing

    h = run_flow(exporter, TraceSampler(0.0))
    spans = exporter.get_finished_spans()
    assert {s.context.trace_id for s in spans} == {trace_id_of("e1")}
    [execution] = by_name(spans, "server.execution")
    assert execution.status.status_code is StatusCode.ERROR
    assert len(by_name(spans, "server.dispatch")) == len(h.dispatched) == 6
    plugins = [s for s in spans if s.name.startswith("worker.plugin.")]
    assert len(plugins) == 6
    assert all(attrs(s)["noetl.reconstructed"] is True for s in plugins)
    assert {parent_id(s) for s in plugins} == {dispatch_span_id(t.task_id) for t in h.dispatched}
    [failed] = [s for s in plugins if s.status.status_code is StatusCode.ERROR]
    assert failed.name == "worker.plugin.python" and attrs(failed)["step_id"] == "broken"
    # The same ids as a sampled run: the rebuilt trace is the one a live one would be.
    exporter.clear()
    run_flow(exporter, TraceSampler(1.0))
    live = {(s.name, s.context.span_id) for s in exporter.get_finished_spans()}
    assert {(s.name, s.context.span_id) for s in spans if s.name.startswith("server.")} == live

    exporter.clear()
    run_flow(exporter, TraceSampler(0.0, force_on_error=False))
    assert exporter.get_finished_spans() == ()


class _Discard(SpanExporter):
    def __init__(self) -> None:
        self.count = 0

    def export(self, spans: Any) -> SpanExportResult:
        self.count += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_per_task_cost_micro_benchmark() -> None:
    """What tracing adds per task (a dispatch span on commit, a plugin span on the worker),
    through the SDK's batch processor. Printed (run with -s), never asserted on time."""
    exported = _Discard()
    tracing = Tracing(
        BatchSpanProcessor(exported, max_queue_size=65536),
        sampler=TraceSampler(1.0),
        service="bench",
    )
    observer = TracingObserver(tracing)
    h = Traced.from_text(FLOW)
    h.start()
    committed = [e for e in h.events if e.type == "step.started"]
    task = TraceSampler(1.0).stamp(h.task("start"))
    outcome = Outcome(task.task_id, ok=True)
    count = 5000
    began = time.perf_counter()
    for _ in range(count):
        observer.committed(h.engine.graph, h.state, committed)
        observer.tool_finished(task, outcome, 0.001)
    elapsed = time.perf_counter() - began
    tracing.shutdown()
    print(f"\ntracing: {elapsed / count * 1e6:.1f} us per task (dispatch + plugin span)")
    assert exported.count == 2 * count


class _Stuck(SpanExporter):
    """An exporter whose collector never answers."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def export(self, spans: Any) -> SpanExportResult:
        self.release.wait(10)
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.release.wait(10)


def test_shutdown_does_not_wait_for_an_unreachable_collector() -> None:
    stuck = _Stuck()
    tracing = Tracing(SimpleSpanProcessor(stuck), sampler=TraceSampler(1.0))
    try:
        assert tracing.shutdown(timeout_s=0.05) is False
    finally:
        stuck.release.set()
    exported = InMemorySpanExporter()
    assert Tracing(SimpleSpanProcessor(exported)).shutdown() is True
