"""Trace context without the OpenTelemetry SDK: ids, sampling, and the task's `trace` field.

Decisions about one execution are made by different processes over time (a server, another
server after a restart, a worker's continuation), so no process can hold the execution's
span open. Every id is derived instead, so each process names the same spans the same way:

* the trace id from the execution id (one trace per execution), and the root span
  (`server.execution`) id from it too;
* a `server.dispatch` span id from the task id (a task keeps its id across retries);
* a `worker.plugin.<kind>` span id from the task id and the attempt, and a
  `worker.sink.<id>` span id from those and the sink id;
* the spans of a decision (`server.route`, `server.when_eval`) from the execution id and
  the sequence number of the event they describe.

Sampling is deterministic too: an execution is traced when its workload says `trace: true`
or when a hash of its id falls under `sample_rate`, so every process that decides for it
makes the same choice. The server stamps the tasks of a traced execution with
`Task.trace`, a W3C `traceparent` naming the dispatch span; a worker traces a task exactly
when it carries one, and the http tool sends the plugin span's context downstream.

This module imports no OpenTelemetry package: the runtimes and the http tool use it on
their hot paths whether or not spans are exported (`noetl.observability.tracing`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from noetl.core import Task

if TYPE_CHECKING:
    from noetl.config.model import TracingSettings

__all__ = [
    "TraceSampler",
    "dispatch_span_id",
    "execution_span_id",
    "forced",
    "parse_traceparent",
    "plugin_span_id",
    "plugin_traceparent",
    "sampler_of",
    "sink_span_id",
    "span_id",
    "trace_id_of",
    "traceparent",
]

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
_TWO_64 = float(1 << 64)


def _digest(parts: tuple[object, ...], size: int) -> int:
    key = "\x1f".join(str(part) for part in parts).encode("utf-8")
    value = int.from_bytes(hashlib.blake2b(key, digest_size=size).digest(), "big")
    return value or 1  # an all-zero id is invalid in W3C and OpenTelemetry


def trace_id_of(execution_id: str) -> int:
    """The 128-bit trace id of an execution."""
    return _digest(("trace", execution_id), 16)


def span_id(*parts: object) -> int:
    """A 64-bit span id derived from `parts`."""
    return _digest(parts, 8)


def execution_span_id(execution_id: str) -> int:
    """The id of the `server.execution` span (the root of the execution's trace)."""
    return span_id("execution", execution_id)


def dispatch_span_id(task_id: str) -> int:
    """The id of the `server.dispatch` span of a task (all its attempts)."""
    return span_id("dispatch", task_id)


def plugin_span_id(task_id: str, attempt: int) -> int:
    """The id of the `worker.plugin.<kind>` span of one attempt of a task."""
    return span_id("plugin", task_id, attempt)


def sink_span_id(task_id: str, attempt: int, sink_id: str) -> int:
    """The id of the `worker.sink.<id>` span of one sink of one attempt of a task."""
    return span_id("sink", task_id, attempt, sink_id)


def traceparent(trace_id: int, parent_id: int) -> str:
    """A W3C `traceparent` header value, sampled."""
    return f"00-{trace_id:032x}-{parent_id:016x}-01"


def parse_traceparent(text: object) -> tuple[int, int] | None:
    """(trace id, parent span id) of a well-formed `traceparent`, else None."""
    if not isinstance(text, str):
        return None
    match = _TRACEPARENT.match(text)
    if match is None:
        return None
    trace, parent = int(match.group(1), 16), int(match.group(2), 16)
    return (trace, parent) if trace and parent else None


def plugin_traceparent(task: Task) -> str | None:
    """The `traceparent` a traced task's tool sends downstream: its trace and its
    `worker.plugin.<kind>` span; None for a task that is not traced."""
    parsed = parse_traceparent(task.trace)
    if parsed is None:
        return None
    return traceparent(parsed[0], plugin_span_id(task.task_id, task.attempt))


def forced(workload: Mapping[str, Any]) -> bool:
    """Whether the workload asks for its execution to be traced (`trace: true`)."""
    value = workload.get("trace")
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


@dataclass(frozen=True, slots=True)
class TraceSampler:
    """Which executions are traced (the `tracing` settings), and their tasks' stamps."""

    sample_rate: float = 0.1
    force_on_error: bool = True

    def sampled(self, execution_id: str, workload: Mapping[str, Any]) -> bool:
        """Whether the execution is traced: the same answer in every process."""
        rate = self.sample_rate
        if rate >= 1.0 or forced(workload):
            return True
        if rate <= 0.0:
            return False
        return _digest(("sample", execution_id), 8) / _TWO_64 < rate

    def stamp(self, task: Task) -> Task:
        """`task` carrying its dispatch span's context (`Task.trace`)."""
        if task.trace is not None:
            return task
        context = traceparent(trace_id_of(task.execution_id), dispatch_span_id(task.task_id))
        return dataclasses.replace(task, trace=context)


def sampler_of(settings: TracingSettings) -> TraceSampler | None:
    """Which executions are traced, from the `tracing` settings; None when tracing is off."""
    if not settings.enabled:
        return None
    return TraceSampler(settings.sample_rate, settings.force_sample_on_error)
