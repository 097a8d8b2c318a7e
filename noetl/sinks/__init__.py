"""Sinks: where a task's output is written, on the worker, after its tool succeeded.

A step's `result.sink` entries travel with its task (`Task.sinks`, specs rendered by the
engine, secret references still markers). After the tool returns `this`, the worker:

1. computes `out`: `this`, or the task's `result.pick` rendered over the tool's context
   and `this` (`{**task.context, "this": this}`: the execution id, the step name, the
   workload, `bind` values and the loop item, but not the values saved by other steps, the
   status helpers or `secrets`, which only the engine has; a pick that needs them fails
   the sinks);
2. writes, for each sink, `out` (or the sink's `args` template rendered over the same
   context plus `this` and `out`) with the writer of its kind, in the order declared:
   first the synchronous sinks, then the `async: true` ones;
3. reports one summary per sink in `Outcome.sinks` (the `sinks` key of the outcome
   payload, only when the task had sinks): `id`, `kind`, `key`, `async`, `status`
   (`ok`, `failed`, `skipped`), `attempts`, `duration_ms`, the writer's own summary
   (`rows`, `table`, `path`, ...) and `error` when it failed.

Each write is tried up to 3 times (0.2 s then 0.4 s apart), or as its `retry` block says
(`max_attempts`, `initial_delay`, `backoff`, `backoff_multiplier`, `max_delay`, `jitter`),
but only while the error is retryable (`RetryableError`: a lost connection, a
serialization failure, a timeout). A failed write may instead be judged by the block's
`retry_when` (retry when true, whatever the error) and `stop_when` (give up when true),
rendered over the task's context plus `error`, `error_type`, `retryable`, `attempt`,
`max_attempts`, `sink_id` and `sink_kind`; a successful write is never written again.
`timeout_ms` bounds each attempt. A synchronous sink that still fails fails the task (`SinkError`,
naming the sink's id and kind) and the sinks after it are skipped; an `async: true` sink is
best-effort: a failure is logged and reported in its summary, never in the task's status.
Async sinks run in this same call, after the synchronous ones (they delay the outcome but
cannot fail it).

Idempotency: a sink's key is `{task key}:{sink id}` (`Task.key` is
`{execution_id}:{step}[:{loop key or index}]`). Writers are given it; an upsert (postgres,
duckdb) or a whole-object replace (file, s3) makes a re-run write nothing twice.

A writer is any object with a `kind` and `write(value, spec, key) -> dict`, raising
`RetryableError` for what may pass and anything else for what will not. The built-in
kinds (`postgres`, `duckdb`, `file`, `s3`) are imported on first use; `duckdb` and `s3`
need a pip extra (`noetl.extras`): without it the sink fails, saying which to install.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from noetl.core import Outcome, Task
from noetl.core.backoff import backoff_seconds
from noetl.credentials.scope import current_scope
from noetl.dsl.render import Renderer
from noetl.errors import (
    MissingExtraError,
    PathRefusedError,
    SinkError,
    TaskTimeoutError,
    TemplateError,
)
from noetl.extras import SINK_EXTRAS, load, needs_extra
from noetl.observability import NOOP, Observer

__all__ = [
    "REGISTRY",
    "Sink",
    "SinkRegistry",
    "SinkReport",
    "retry_delays",
    "run_sinks",
    "sink_output",
]

log = logging.getLogger("noetl.sinks")

# The default retry of a sink write: 3 attempts, 0.2 s then 0.4 s apart.
DEFAULT_RETRY: dict[str, Any] = {
    "max_attempts": 3,
    "initial_delay": 0.2,
    "backoff_multiplier": 2.0,
    "max_delay": 30.0,
    "jitter": False,
    "backoff": "exponential",
}

_BUILTIN: dict[str, str] = {
    "postgres": "noetl.sinks.postgres:PostgresWriter",
    "duckdb": "noetl.sinks.duckdb:DuckdbWriter",
    "file": "noetl.sinks.file:FileWriter",
    "s3": "noetl.sinks.s3:S3Writer",
}


class Sink(Protocol):
    """Writes one value to one kind of target."""

    kind: str

    def write(self, value: Any, spec: Mapping[str, Any], key: str) -> dict[str, Any]:
        """Write `value` as `spec` says; `key` is the write's idempotency key. Returns a
        short JSON-safe summary (no secrets). Raises `RetryableError` when a retry may
        succeed; any other exception is final."""
        ...


class SinkRegistry:
    """Sink writers by kind; the built-in kinds are imported when first used. A registry
    with a `parent` asks it for the kinds it has no writer of (a runtime's registry holds
    its own file writer, with its root, over the shared one)."""

    def __init__(
        self,
        sinks: Iterable[Sink] = (),
        *,
        builtins: bool = True,
        parent: SinkRegistry | None = None,
    ) -> None:
        self._sinks: dict[str, Sink] = {}
        self._lazy = dict(_BUILTIN) if builtins else {}
        self._lock = threading.Lock()
        self._parent = parent
        for sink in sinks:
            self.register(sink)

    def register(self, sink: Sink, *, replace: bool = False) -> None:
        """Add a writer; a second one for a kind already known needs `replace=True`."""
        with self._lock:
            if (sink.kind in self._sinks or sink.kind in self._lazy) and not replace:
                raise ValueError(f"a sink for kind {sink.kind!r} is already registered")
            self._lazy.pop(sink.kind, None)
            self._sinks[sink.kind] = sink

    def unregister(self, kind: str) -> None:
        with self._lock:
            self._sinks.pop(kind, None)
            self._lazy.pop(kind, None)

    def get(self, kind: str) -> Sink:
        """The writer of `kind`; SinkError when there is none."""
        with self._lock:
            sink = self._sinks.get(kind)
            if sink is None and kind in self._lazy:
                module, _, name = self._lazy[kind].partition(":")
                extra = SINK_EXTRAS.get(kind)
                if extra is None:
                    imported = importlib.import_module(module)
                else:  # MissingExtraError: the kind stays, to say so again next time
                    imported = load(module, extra, f"the {kind} sink")
                sink = getattr(imported, name)()
                del self._lazy[kind]
                self._sinks[kind] = sink
        if sink is None and self._parent is not None:
            return self._parent.get(kind)
        if sink is None:
            raise SinkError(f"no sink registered for kind {kind!r}")
        return sink

    def kinds(self) -> list[str]:
        with self._lock:
            own = {*self._sinks, *self._lazy}
        return sorted(own | set(self._parent.kinds() if self._parent else ()))


REGISTRY = SinkRegistry()


@dataclass(frozen=True, slots=True)
class SinkReport:
    """What the sinks of one task did: a summary per sink, and the error that fails the
    task (a synchronous sink that failed), if any."""

    summaries: tuple[dict[str, Any], ...]
    error: str | None = None

    def apply(self, outcome: Outcome) -> Outcome:
        """The tool's outcome with the sink summaries, failed when a sink failed it."""
        if self.error is None:
            return replace(outcome, sinks=self.summaries)
        return replace(
            outcome,
            ok=False,
            error=self.error,
            error_type="SinkError",
            retryable=False,
            sinks=self.summaries,
        )


# One renderer for every thread: its limits are per render (noetl.dsl.template_limits), and it
# keeps the templates it compiled.
_RENDERER = Renderer()


def _renderer() -> Renderer:
    return _RENDERER


def sink_output(task: Task, this: Any) -> Any:
    """`out` as the sinks see it: `this`, or the task's pick rendered over the tool's
    context and `this`. Raises TemplateError."""
    if task.pick is None:
        return this
    return _renderer().render(task.pick, {**task.context, "this": this})


def run_sinks(
    task: Task,
    this: Any,
    *,
    registry: SinkRegistry | None = None,
    sleep: Callable[[float], None] = time.sleep,
    observer: Observer = NOOP,
) -> SinkReport:
    """Run the task's sinks on the tool's result `this` (see the module docstring),
    telling `observer` when each starts and finishes.

    Never raises; runs with the task's secret scope current (`ToolRegistry.run`)."""
    writers = REGISTRY if registry is None else registry
    scope = current_scope()
    try:
        out = sink_output(task, this)
    except TemplateError as exc:
        text = f"result.pick (rendered for the sinks on the worker): {exc}"
        skipped = tuple(_summary(task, s, "skipped") for s in task.sinks)
        return SinkReport(skipped, scope.mask(text))
    order = [i for i, s in enumerate(task.sinks) if not s.get("async")]
    order += [i for i, s in enumerate(task.sinks) if s.get("async")]
    summaries: dict[int, dict[str, Any]] = {}
    error: str | None = None
    for index in order:
        sink = task.sinks[index]
        if error is not None:
            summaries[index] = _summary(task, sink, "skipped")
            continue
        observer.sink_started(task, sink)
        summary = _run_one(task, sink, this, out, writers=writers, sleep=sleep)
        observer.sink_finished(task, sink, scope.mask(summary))
        summaries[index] = summary
        if summary["status"] == "ok":
            continue
        attempts = summary["attempts"]
        message = (
            f"sink '{sink['id']}' ({sink['kind']}) failed after {attempts} "
            f"attempt{'s' if attempts != 1 else ''}: {summary['error']}"
        )
        if sink.get("async"):
            log.warning("task %s: async %s", task.task_id, scope.mask(message))
        else:
            error = message
    ordered = tuple(scope.mask(summaries[i]) for i in range(len(task.sinks)))
    return SinkReport(ordered, None if error is None else scope.mask(error))


def _summary(task: Task, sink: Mapping[str, Any], status: str) -> dict[str, Any]:
    return {
        "id": sink["id"],
        "kind": sink["kind"],
        "key": f"{task.key}:{sink['id']}",
        "async": bool(sink.get("async")),
        "status": status,
    }


def _run_one(
    task: Task,
    sink: Mapping[str, Any],
    this: Any,
    out: Any,
    *,
    writers: SinkRegistry,
    sleep: Callable[[float], None],
) -> dict[str, Any]:
    """Write one sink, with its retries; the summary (status ok or failed)."""
    summary = _summary(task, sink, "failed")
    key = summary["key"]
    started = time.perf_counter()
    attempts = 0
    try:
        writer = writers.get(str(sink["kind"]))
        spec = _resolved_spec(task, sink)
        value = _value(task, sink, this, out)
        delays = retry_delays(sink.get("retry"), key)
        timeout_ms = sink.get("timeout_ms")
        while True:
            attempts += 1
            try:
                written = _call(lambda: writer.write(value, spec, key), timeout_ms)
                break
            except Exception as exc:
                if attempts > len(delays) or not _again(task, sink, exc, attempts, delays):
                    raise
                sleep(delays[attempts - 1])
    except PathRefusedError as exc:
        summary["error"] = str(exc.at(task.step))
    except MissingExtraError as exc:
        extra = SINK_EXTRAS.get(str(sink["kind"]))
        what = f"step '{task.step}' uses the {sink['kind']} sink"
        summary["error"] = str(exc) if extra is None else needs_extra(what, extra)
    except Exception as exc:
        summary["error"] = _describe(exc)
    else:
        if isinstance(written, dict):
            summary.update({k: v for k, v in written.items() if k not in summary})
        summary["status"] = "ok"
    summary["attempts"] = attempts
    summary["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return summary


def _again(
    task: Task, sink: Mapping[str, Any], exc: Exception, attempt: int, delays: list[float]
) -> bool:
    """Whether a failed write is tried again: `stop_when` true stops, `retry_when` (when
    given) decides, else only a retryable error is. A condition that cannot be rendered
    fails the sink (SinkError naming the key)."""
    retryable = getattr(exc, "retryable", False) is True
    policy = sink.get("retry") or {}
    retry_when, stop_when = policy.get("retry_when"), policy.get("stop_when")
    if retry_when is None and stop_when is None:
        return retryable
    names = {
        **task.context,
        "error": _describe(exc),
        "error_type": type(exc).__name__,
        "retryable": retryable,
        "attempt": attempt,
        "max_attempts": len(delays) + 1,
        "sink_id": sink.get("id"),
        "sink_kind": sink.get("kind"),
    }
    renderer = _renderer()
    for key, condition in (("stop_when", stop_when), ("retry_when", retry_when)):
        if condition is None:
            continue
        try:
            verdict = renderer.truthy(condition, names)
        except TemplateError as exc2:
            raise SinkError(f"retry.{key}: {exc2}") from None
        if key == "stop_when" and verdict:
            return False
        if key == "retry_when":
            return verdict
    return retryable


def _resolved_spec(task: Task, sink: Mapping[str, Any]) -> dict[str, Any]:
    """The sink's spec with its secret markers replaced by their values (the scope
    remembers them, so they are masked in what the task reports)."""
    spec = dict(sink.get("spec") or {})
    if not task.secrets:
        return spec
    return current_scope().resolve(replace(task, spec=spec, args={})).spec


def _value(task: Task, sink: Mapping[str, Any], this: Any, out: Any) -> Any:
    """What the sink writes: `out`, or its `args` rendered with `this` and `out`."""
    args = sink.get("args")
    if args is None:
        return out
    try:
        return _renderer().render(args, {**task.context, "this": this, "out": out})
    except TemplateError as exc:
        raise SinkError(f"args: {exc}") from None


def retry_delays(retry: Mapping[str, Any] | None, key: str) -> list[float]:
    """The waits between the attempts of a write: one fewer than its attempts.

    `retry` is a `RetryPolicy` as JSON (None: the default); jitter is seeded by the key
    and the attempt, so the same write waits the same way every time."""
    policy = {**DEFAULT_RETRY, **(retry or {})}
    jitter = bool(policy["jitter"])
    return [
        backoff_seconds(
            attempt,
            initial=float(policy["initial_delay"]),
            multiplier=float(policy["backoff_multiplier"]),
            max_delay=float(policy["max_delay"]),
            backoff=str(policy["backoff"]),
            jitter=random.Random(f"{key}:{attempt}").random() if jitter else None,
        )
        for attempt in range(1, int(policy["max_attempts"]))
    ]


def _call(write: Callable[[], dict[str, Any]], timeout_ms: int | None) -> dict[str, Any]:
    """Run a write, within `timeout_ms` when given (TaskTimeoutError past it).

    A timed-out write cannot be stopped from outside: its thread is left to finish on its
    own (its writer's connect and read timeouts end it), which is why writes are upserts."""
    if timeout_ms is None:
        return write()
    box: dict[str, Any] = {}
    context = contextvars.copy_context()  # the secret scope goes with the write

    def target() -> None:
        try:
            box["value"] = context.run(write)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="noetl-sink", daemon=True)
    thread.start()
    thread.join(timeout_ms / 1000)
    if thread.is_alive():
        raise TaskTimeoutError(f"the write took longer than {timeout_ms} ms")
    if "error" in box:
        raise box["error"]
    result: dict[str, Any] = box["value"]
    return result


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, SinkError | TaskTimeoutError) or type(exc).__module__.startswith("noetl"):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
