"""The policies around a tool call, as one chain of small middlewares.

A middleware is a callable `(task, call_next) -> Outcome`: it does one thing before
and/or after calling the rest of the chain (`call_next(task)`). `compose` binds a list of
them around a tool's `run` once; the registry (`noetl.worker.tools.ToolRegistry`) keeps
the composed chains of each tool. From the outside in:

| middleware | does |
|---|---|
| `LogContext` | log records of the call carry the task's context (`run` only) |
| `Observe` | tells the observer the tool started and finished (`run` only; none for NOOP) |
| `SelectResult` | keeps a `select` task's (or a too large) result whole, reports a part |
| `ScriptCheck` | fails a task whose `spec.script` was never read (script kinds only) |
| `SecretScope` | makes the task's secret scope current; masks its values in the outcome |
| `CaptureOutput` | the attempt's output: lines streamed, tool log lines kept (`run` only) |
| `CrashCapture` | a tool (or a policy inside) that raises costs one task, not the worker |
| `ResolveSecrets` | replaces the task's secret markers with their values |
| `Sinks` | writes the bounded result to the task's sinks (their own retries) |
| `ResultBound` | refuses a result too large, too deep or not JSON (`bounded`) |
| `TimeLimit` | one deadline from `task.timeout_ms` (`noetl.worker.time_limit`) |

Why this order: the selection (or the spill) is made of the outcome as it is final
(masked, bounded, written by the sinks: the result store keeps what the event log would
have), and only the observer and the log see what it reports; masking wraps everything
that may quote a secret (a crash's message, a sink's error, a line of output); crash
capture wraps the resolution (a missing secret is the task's failure) and the sinks; the
sinks write only a result that passed the bound; the time limit bounds the tool alone
(each sink write has its own `timeout_ms`). A task with nothing to resolve, mask or
write (no secret references, no sinks, a tool that uses no credentials: loops of python
items) takes the short chain without the three secret and sink middlewares.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from noetl.core import Outcome, Task
from noetl.credentials.scope import SecretProvider, current_scope, enter_scope, leave_scope
from noetl.credentials.scope import SecretScope as _Scope
from noetl.dsl.limits import check_data
from noetl.observability import Observer
from noetl.observability.logging import bind_task, reset_task
from noetl.scripts import SCRIPT_CODE
from noetl.sinks import SinkRegistry, run_sinks
from noetl.store.ports import ResultStore
from noetl.worker.selection import select_result, spill_result
from noetl.worker.time_limit import TimeLimit

__all__ = [
    "CrashCapture",
    "Handler",
    "LogContext",
    "Middleware",
    "Observe",
    "ResolveSecrets",
    "ResultBound",
    "ScriptCheck",
    "SecretScope",
    "SelectResult",
    "Sinks",
    "TimeLimit",
    "bounded",
    "compose",
]

Handler = Callable[[Task], Outcome]


class Middleware(Protocol):
    """One policy around a tool call."""

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        """Do this policy's part and call `call_next(task)` (or not) for the rest."""
        ...


def compose(middlewares: Sequence[Middleware], handler: Handler) -> Handler:
    """`handler` wrapped in `middlewares`, the first outermost."""
    for middleware in reversed(middlewares):
        handler = functools.partial(middleware, call_next=handler)
    return handler


class LogContext:
    """Log records written during the call carry the task's context."""

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        token = bind_task(task)
        try:
            return call_next(task)
        finally:
            reset_task(token)


class Observe:
    """Tells the observer when the tool starts and finishes (with its duration)."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        observer = self.observer
        started = time.perf_counter()
        observer.tool_started(task)
        outcome = call_next(task)
        took = time.perf_counter() - started
        if outcome.duration_ms is not None:
            # a python task run ahead in a batch ran before its chain (noetl.worker.python_pool)
            took = max(took, outcome.duration_ms / 1000)
        observer.tool_finished(task, outcome, took)
        return outcome


class SelectResult:
    """A task with `result.select` keeps its whole result in the result store and
    reports the selected fields with the reference; one without, whose result is over
    `inline_bytes` of JSON, reports an envelope of its spilled result instead
    (`noetl.worker.selection`). `inline_bytes` None, or no result store: nothing is
    spilled (a pipeline's tasks, whose pipeline's own result is)."""

    def __init__(self, results: ResultStore | None, inline_bytes: int | None = None) -> None:
        self.results = results
        self.inline_bytes = inline_bytes if results is not None else None

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        outcome = call_next(task)
        if task.select:
            return select_result(outcome, task, self.results)
        if self.inline_bytes is None or self.results is None:
            return outcome
        return spill_result(outcome, task, self.results, self.inline_bytes)


class ScriptCheck:
    """A task whose `spec.script` file was not read when its execution started (the
    process that started it could not read script files) cannot run here: it fails."""

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        script = task.spec.get("script") if task.kind in SCRIPT_CODE else None
        if script is None:
            return call_next(task)
        return Outcome(
            task_id=task.task_id,
            ok=False,
            error=f"{task.kind} tool: the script file {script!r} was not read into the "
            f"playbook when the execution started (see docs/dsl.md, script files)",
            error_type="FatalError",
        )


class SecretScope:
    """The task's `SecretScope` is current for the rest of the chain (`current_scope()`:
    credentials, sinks); every secret value it handed out is masked in the outcome."""

    def __init__(self, secrets: SecretProvider | None) -> None:
        self.secrets = secrets

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        scope = _Scope(self.secrets)
        token = enter_scope(scope)
        try:
            outcome = call_next(task)
        finally:
            leave_scope(token)
        return scope.mask_outcome(outcome)


class ResolveSecrets:
    """The task's secret markers replaced with their values from the current scope (a
    missing secret raises: the task fails)."""

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        return call_next(current_scope().resolve(task))


class CrashCapture:
    """A raise inside becomes the task's failed outcome, naming the tool and the error."""

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        started = time.perf_counter()
        try:
            return call_next(task)
        except Exception as exc:  # a tool bug must cost one task, not the worker
            return Outcome(
                task_id=task.task_id,
                ok=False,
                error=f"tool {task.kind!r} failed: {type(exc).__name__}: {exc}",
                error_type=type(exc).__name__,
                retryable=getattr(exc, "retryable", False) is True,
                duration_ms=(time.perf_counter() - started) * 1000,
            )


class Sinks:
    """After the tool succeeded, its task's sinks write the result (see `noetl.sinks`);
    a failed synchronous sink fails the task. A task whose sinks are handed off
    (`Task.sinks_pool`) runs none: a `sinks` task of that pool writes its result."""

    def __init__(self, sinks: SinkRegistry | None, observer: Observer) -> None:
        self.sinks = sinks
        self.observer = observer

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        outcome = call_next(task)
        if not (outcome.ok and task.sinks) or task.sinks_pool is not None:
            return outcome
        report = run_sinks(task, outcome.this, registry=self.sinks, observer=self.observer)
        return report.apply(outcome)


class ResultBound:
    """The tool's outcome as it may be reported (see `bounded`)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def __call__(self, task: Task, call_next: Handler) -> Outcome:
        return bounded(call_next(task), self.max_bytes)


def bounded(outcome: Outcome, max_bytes: int) -> Outcome:
    """The outcome as it may be reported: a result nested deeper than a playbook may be,
    holding a NaN or an infinity (JSON, and PostgreSQL, cannot hold them) or over
    `max_bytes` of JSON fails the task, fatally, saying which and where. Checked before
    any sink writes the result, and before it reaches the store, the engine or the API,
    which would otherwise fail on it far from its cause. (A NUL character is kept: the
    stores hold it, see noetl.store._pg_nul.)"""
    problem = check_data(outcome.this, root="result", max_bytes=max_bytes, nul=False)
    if problem is None:
        return outcome
    refused = f"the tool's result was refused: {problem}"
    if not outcome.ok and outcome.error:
        refused = f"{outcome.error} ({refused})"
    return Outcome(
        task_id=outcome.task_id,
        ok=False,
        error=refused,
        error_type="ResultRefused",
        retryable=False,
        stdout=outcome.stdout,
        duration_ms=outcome.duration_ms,
    )
