"""Trace ids, sampling and the task's trace field (no OpenTelemetry involved)."""

from __future__ import annotations

import json

from noetl.config import Settings
from noetl.core import Task
from noetl.observability.trace_context import (
    TraceSampler,
    dispatch_span_id,
    execution_span_id,
    forced,
    parse_traceparent,
    plugin_span_id,
    plugin_traceparent,
    sampler_of,
    sink_span_id,
    trace_id_of,
    traceparent,
)
from noetl.tools.http import _headers


def task(**changes: object) -> Task:
    base = Task(
        task_id="e1.fetch",
        execution_id="e1",
        step="fetch",
        kind="http",
        spec={"url": "http://x"},
        args={},
        context={},
        key="e1:fetch",
    )
    return Task.from_dict({**base.to_dict(), **changes})


def test_ids_are_derived_from_what_they_name() -> None:
    assert trace_id_of("e1") == trace_id_of("e1") != trace_id_of("e2")
    assert 0 < trace_id_of("e1") < 2**128
    assert 0 < execution_span_id("e1") < 2**64
    ids = {
        execution_span_id("e1"),
        dispatch_span_id("e1.a"),
        dispatch_span_id("e1.b"),
        plugin_span_id("e1.a", 1),
        plugin_span_id("e1.a", 2),
        sink_span_id("e1.a", 1, "out"),
        sink_span_id("e1.a", 2, "out"),
    }
    assert len(ids) == 7  # every span of the execution has an id of its own


def test_traceparent_round_trip_and_malformed_values() -> None:
    text = traceparent(trace_id_of("e1"), dispatch_span_id("e1.a"))
    assert text == f"00-{trace_id_of('e1'):032x}-{dispatch_span_id('e1.a'):016x}-01"
    assert parse_traceparent(text) == (trace_id_of("e1"), dispatch_span_id("e1.a"))
    for bad in (None, 3, "", "00-abc-def-01", "00-" + "0" * 32 + "-" + "1" * 16 + "-01"):
        assert parse_traceparent(bad) is None, bad


def test_sampling_is_the_same_for_one_execution_everywhere() -> None:
    ids = [f"{1_700_000_000_000 + i}{i % 997:06d}" for i in range(4000)]
    tenth = [i for i in ids if TraceSampler(0.1).sampled(i, {})]
    # Another process, another sampler object: the same choice for every execution.
    assert tenth == [i for i in ids if TraceSampler(0.1, force_on_error=False).sampled(i, {})]
    assert 0.07 < len(tenth) / len(ids) < 0.13
    # A higher rate keeps every execution a lower one traced (the hash is compared).
    half = {i for i in ids if TraceSampler(0.5).sampled(i, {})}
    assert set(tenth) <= half
    assert not any(TraceSampler(0.0).sampled(i, {}) for i in ids)
    assert all(TraceSampler(1.0).sampled(i, {}) for i in ids)


def test_workload_trace_true_forces_sampling() -> None:
    never = TraceSampler(0.0)
    assert never.sampled("e1", {"trace": True})
    assert never.sampled("e1", {"trace": "TRUE"})
    assert not never.sampled("e1", {"trace": False})
    assert not never.sampled("e1", {"trace": "yes please"})
    assert not never.sampled("e1", {"tracer": True})
    assert forced({"trace": True}) and not forced({})


def test_the_sampler_follows_the_settings() -> None:
    assert sampler_of(Settings().tracing) is None  # tracing is off by default
    on = Settings.model_validate(
        {"tracing": {"enabled": True, "sample_rate": 0.25, "force_sample_on_error": False}}
    )
    assert sampler_of(on.tracing) == TraceSampler(0.25, force_on_error=False)


def test_a_task_carries_its_trace_only_when_traced() -> None:
    plain = task()
    assert "trace" not in plain.to_dict()
    size = len(json.dumps(plain.to_dict()))
    stamped = TraceSampler(1.0).stamp(plain)
    assert stamped.trace == traceparent(trace_id_of("e1"), dispatch_span_id("e1.fetch"))
    assert Task.from_dict(stamped.to_dict()) == stamped
    assert len(json.dumps(stamped.to_dict())) > size
    assert TraceSampler(1.0).stamp(stamped) is stamped
    assert Task.from_dict({**plain.to_dict(), "trace": 17}).trace is None  # garbage dropped


def test_a_traced_tasks_plugin_context_goes_downstream() -> None:
    stamped = TraceSampler(1.0).stamp(task())
    expected = traceparent(trace_id_of("e1"), plugin_span_id("e1.fetch", 1))
    assert plugin_traceparent(stamped) == expected
    assert _headers({}, stamped)["traceparent"] == expected
    second = Task.from_dict({**stamped.to_dict(), "attempt": 2})
    assert plugin_traceparent(second) == traceparent(
        trace_id_of("e1"), plugin_span_id("e1.fetch", 2)
    )
    # A traceparent the spec sets wins; an untraced task keeps today's behaviour.
    mine = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    assert _headers({"traceparent": mine}, stamped)["traceparent"] == mine
    assert plugin_traceparent(task()) is None
    inherited = task(context={"traceparent": mine})
    assert _headers({}, inherited)["traceparent"] == mine
    fresh = _headers({}, task())["traceparent"]
    assert parse_traceparent(fresh) is not None
    assert parse_traceparent(fresh) != parse_traceparent(expected)
