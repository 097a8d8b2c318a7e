"""The `pipeline` tool: a step's tasks run in order by one worker, as one task.

Upstream NoETL's list of tasks under `tool` (and a single tool with policy rules; see
noetl.dsl.upstream_pipeline) reaches the worker as ONE task of kind `pipeline`, under
one lease: `spec.tasks` holds each task as written (templates unrendered). Each task is
rendered just before it runs, here, against the step's names (the task's `context`, the
workload's keys bare when `render_code`) and the pipeline's own:

* `_prev`: the result of the last task that succeeded; `results`: `{label: result}` of
  the tasks that succeeded, each also under its label; `_task`, `_attempt` (from 1);
* `ctx` / `iter`: the execution's and the loop iteration's variables, as the step saw
  them, with what the tasks `set` so far; the names a task's `set` gives.

It then runs through the worker's tool registry like any task (its kind's tool, its
credentials, its secrets resolved and masked), with its own `timeout_ms` (else the
default a task has, `spec.task_timeout_ms`), at most the time left of the pipeline's
`timeout_ms` when the step gives it one. Its policy rules decide what follows
(noetl.worker.policy_rules): `continue` (the next task), `jump` (the task named `to`),
`break` (stop, successfully), `fail`, or `retry`: the attempt ends, asking the engine for
a retry after the rule's delay (`Outcome.retry`); the engine decides it as every retry
(`retry.started`, a backoff timer, `retry.processed` and a dead letter when the rule's
attempts run out), and the next attempt resumes at that task.

Durable progress: after each task the pipeline saves where it is as its task's checkpoint
(noetl.worker.pipeline_state), so an attempt after a retry, a lost worker or a replay
resumes after the last task that finished, never running it again. The outcome lists the
attempt's task runs (`Outcome.tasks`, in `tool.processed`). The pipeline's result is
`_prev` at the end; the `ctx.*` values set are returned in `Outcome.ctx` for the engine
to apply.

Bounded: no task starts after a cancel (`cancel`) or past the pipeline's timeout, a rule
retries at most `attempts` (at most 100) times in a row, a delay is at most an hour, and
the tasks run at most `MAX_RUNS` times in all, over all attempts (a `jump` back is a loop).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from noetl.core import Outcome, Task
from noetl.core.secrets import SECRETS, referenced
from noetl.decision.spilled import ResultReader
from noetl.dsl.model import Tool, pipeline_task_tool
from noetl.dsl.render import Renderer, render_spec
from noetl.dsl.rewrite import ShapeError
from noetl.dsl.spilled import Resolve, lazy
from noetl.errors import TemplateError
from noetl.tools.deadline import Deadline
from noetl.worker.pipeline_state import LocalCheckpoints, Progress, restarts_chain, trace_entry
from noetl.worker.policy_rules import Action, decide, output_view, retry_delay

if TYPE_CHECKING:
    from noetl.store.ports import CheckpointStore
    from noetl.worker.tools import ToolRegistry

__all__ = ["MAX_RUNS", "POLICY_FAILURE", "PipelineTool"]

log = logging.getLogger(__name__)

MAX_RUNS = 10_000  # task runs of one pipeline, retries and jumps included
POLICY_FAILURE = "PolicyFailure"  # a fatal error type (noetl.errors.FATAL_ERROR_TYPES)
POLICY_RETRY = "PolicyRetry"  # a task that succeeded, but whose result a rule retries
_OWN = ("_prev", "_task", "_attempt", "results", "ctx", "iter", "output", "outcome")


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class _Stopped(Exception):
    """The pipeline ends before its tasks do: canceled, out of time, or too many runs."""

    def __init__(self, message: str, error_type: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.retryable = retryable


class PipelineTool:
    """Runs `pipeline` tasks with the tools of `registry` (see the module docstring)."""

    kind: str = "pipeline"
    uses_credentials = False  # each of its tasks gets its own secret scope

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        renderer: Renderer | None = None,
        checkpoints: CheckpointStore | None = None,
    ) -> None:
        self._registry = registry
        self.renderer = renderer or Renderer()
        # Each pipeline's progress between its attempts (noetl.worker.pipeline_state).
        self.checkpoints: CheckpointStore = checkpoints or LocalCheckpoints()
        # A spilled result of an earlier step, read field by field (noetl.dsl.spilled).
        results = registry.results
        self.resolve: Resolve | None = None if results is None else ResultReader(results)
        self._lock = threading.Lock()
        self._cancels: dict[str, threading.Event] = {}

    def cancel(self, task_id: str) -> bool:
        """Stop the pipeline of `task_id`: no task starts after this, a retry's wait ends
        now (the running task itself is stopped by its own tool's `cancel`)."""
        with self._lock:
            event = self._cancels.get(task_id)
        if event is None:
            return False
        event.set()
        return True

    def run(self, task: Task) -> Outcome:
        event = threading.Event()
        with self._lock:
            self._cancels[task.task_id] = event
        started = time.perf_counter()
        try:
            run = _Run(self, task, event)
            return run.go(started)
        finally:
            with self._lock:
                self._cancels.pop(task.task_id, None)

    def call(self, task: Task) -> Outcome:
        """Run one task of a pipeline with the tool of its kind (never raises)."""
        return self._registry.call(task)


class _Run:
    """One attempt of a pipeline task: its progress between tasks (`Progress`, saved as
    the task's checkpoint after each of them)."""

    def __init__(self, tool: PipelineTool, task: Task, canceled: threading.Event) -> None:
        self.tool = tool
        self.task = task
        self.canceled = canceled
        self.tasks: list[Mapping[str, Any]] = [
            t for t in task.spec.get("tasks") or [] if isinstance(t, Mapping)
        ]
        self.render_code = task.spec.get("render_code") is True
        limit = Deadline.of(task)  # the time limit's, when the registry runs the pipeline
        self.deadline = None if limit is None else limit.at
        self.p = Progress(
            ctx=dict(task.context.get("ctx") or {}), iter=dict(task.context.get("iter") or {})
        )
        self.stdout: list[str] = []
        self.saved = False  # whether a checkpoint of this task may exist

    # --- the loop -------------------------------------------------------------------------

    def go(self, started: float) -> Outcome:
        labels = [str(t.get("name")) for t in self.tasks]
        p = self.p
        try:
            kept = self._load()
            if kept is not None and not restarts_chain(self.task, kept):
                self.p = p = kept.resumed()
            while p.index < len(self.tasks):
                p.runs += 1
                self._check(p.runs)
                spec = self.tasks[p.index]
                label = labels[p.index]
                outcome, values = self._attempt(spec, label, p.tries + 1)
                action = decide(
                    list(spec.get("rules") or []), values, self.tool.renderer, ok=outcome.ok
                )
                self._set(action.set, values, f"task '{label}' rule")
                p.record(
                    trace_entry(
                        label,
                        self.task.attempt,
                        p.tries + 1,
                        ok=outcome.ok,
                        do=action.do,
                        duration_ms=outcome.duration_ms,
                        error=outcome.error,
                        to=action.to if action.do == "jump" else None,
                    )
                )
                if action.do == "retry":
                    p.tries += 1
                    if p.tries >= action.attempts:
                        p.tries = 0
                        self._save("fail")
                        return self._failed(outcome, label, started, exhausted=action.attempts)
                    self._save("retry")
                    return self._retry(outcome, label, action, started)
                p.tries = 0
                if action.do == "fail":
                    self._save("fail")
                    return self._failed(outcome, label, started, decided=action.rule is not None)
                if action.do == "break":
                    p.index = len(self.tasks)
                elif action.do == "jump" and action.to:
                    p.index = labels.index(action.to)
                else:
                    p.index += 1
                if p.index < len(self.tasks):
                    self._save(None)
        except _Stopped as stop:
            return self._outcome(
                ok=False,
                started=started,
                error=str(stop),
                error_type=stop.error_type,
                retryable=stop.retryable,
            )
        self._forget()
        return self._outcome(ok=True, started=started, this=p.prev)

    def _check(self, runs: int) -> None:
        if self.canceled.is_set():
            raise _Stopped("canceled", "CancelError")
        if runs > MAX_RUNS:
            raise _Stopped(
                f"the pipeline ran its tasks {MAX_RUNS} times (retries and jumps included); "
                f"stopped",
                "FatalError",
            )
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise _Stopped(
                f"the pipeline ran past its timeout_ms ({self.task.timeout_ms})",
                "TaskTimeoutError",
                retryable=True,
            )

    # --- the checkpoint -------------------------------------------------------------------

    def _load(self) -> Progress | None:
        """The progress an earlier attempt saved. One saved by a LATER attempt means this
        one lost its lease (it stops), unless that run failed for good: this is a replay
        from the dead-letter queue (its attempts count from 1 again), which takes the
        progress over."""
        task = self.task
        try:
            kept = self.tool.checkpoints.load(task.task_id)
        except Exception as exc:  # the store is down: start from the first task
            log.warning("pipeline %s: its checkpoint could not be read: %s", task.task_id, exc)
            return None
        if kept is None:
            return None
        self.saved = True
        progress = Progress.of_value(kept.value)
        if progress is None or kept.attempt <= task.attempt:
            return progress
        if progress.end != "fail":
            raise _Stopped(
                "a later attempt of this task is running (its lease was lost)",
                "LeaseLost",
                retryable=False,
            )
        self._forget()  # the replay's attempts save their own progress from here
        return progress

    def _save(self, end: str | None) -> None:
        """Save the progress; a failure to is logged (the next attempt then starts from
        an earlier checkpoint, or the first task)."""
        self.p.end = end
        self.saved = True
        task = self.task
        try:
            kept = self.tool.checkpoints.save(
                task.task_id, task.execution_id, task.attempt, self.p.to_value()
            )
        except Exception as exc:
            log.warning("pipeline %s: its checkpoint could not be saved: %s", task.task_id, exc)
            return
        if not kept:
            raise _Stopped(
                "a later attempt of this task is running (its lease was lost)",
                "LeaseLost",
                retryable=False,
            )

    def _forget(self) -> None:
        if not self.saved:
            return  # nothing to forget: no attempt saved progress (one task that ran once)
        try:
            self.tool.checkpoints.drop(self.task.task_id)
        except Exception as exc:
            task_id = self.task.task_id
            log.warning("pipeline %s: its checkpoint could not be dropped: %s", task_id, exc)

    # --- one task -------------------------------------------------------------------------

    def _attempt(
        self, spec: Mapping[str, Any], label: str, attempt: int
    ) -> tuple[Outcome, dict[str, Any]]:
        """Render and run one task; its outcome and the names its rules see."""
        values = self._values(label, attempt)
        try:
            tool = pipeline_task_tool(spec.get("tool"))
        except (ShapeError, ValidationError) as exc:
            raise _Stopped(f"task '{label}': not a valid tool: {exc}", "FatalError") from None
        kind = tool.kind
        try:
            sub = self._subtask(tool, label, values)
        except TemplateError as exc:  # the rules decide, as for any failure of the task
            outcome = Outcome(
                self.task.task_id, ok=False, error=str(exc), error_type="TemplateError"
            )
        else:
            outcome = self.tool.call(sub)
        if outcome.stdout:
            self.stdout.append(outcome.stdout)
        if outcome.ok:
            self.p.prev = outcome.this
            self.p.results[label] = outcome.this
        view = output_view(kind, outcome, attempt)
        values = {**values, "_prev": self.p.prev, "results": dict(self.p.results)}
        if spec.get("set"):
            # A task's own `set` reads its result as `output` (and `result`); `outcome`
            # is the view its rules read.
            own = {**values, "output": outcome.this, "result": outcome.this, "outcome": view}
            self._set(dict(spec["set"]), own, f"task '{label}' set")
        values |= self._own(label, attempt) | self.p.names
        return outcome, values | {"output": view, "outcome": view}

    def _subtask(self, tool: Tool, label: str, values: dict[str, Any]) -> Task:
        renderer = self.tool.renderer
        spec = render_spec(
            renderer, tool.kind, tool.spec, values, literal_code=not self.render_code
        )
        args = renderer.render(tool.args, values, field="args") if tool.args else {}
        secrets: set[str] = set()
        if "secrets" in repr([tool.spec, tool.args]):  # a marker counts where a template put it
            secrets = referenced(spec) | referenced(args)
        return dataclasses.replace(
            self.task,
            kind=tool.kind,
            spec=spec,
            args=args,
            context=self._context(label, values),
            key=f"{self.task.key}:{label}",
            timeout_ms=self._time_left(tool.timeout_ms),
            secrets=tuple(sorted(secrets)),
            sinks=(),
            pick=None,
        )

    def _time_left(self, own: int | None) -> int | None:
        own = own or _positive(self.task.spec.get("task_timeout_ms"))
        if self.deadline is None:
            return own
        left = max(int((self.deadline - time.monotonic()) * 1000), 1)
        return left if own is None else min(own, left)

    def _context(self, label: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """The context a task's tool sees (python code reads it): the step's, and the
        pipeline's names."""
        own = {
            key: values[key] for key in ("_prev", "_task", "_attempt", "results") if key in values
        }
        return {**self.task.context, **own, "ctx": dict(self.p.ctx), "iter": dict(self.p.iter)}

    # --- names ----------------------------------------------------------------------------

    def _values(self, label: str, attempt: int) -> dict[str, Any]:
        """The names a task's templates see (see the module docstring)."""
        context = self.task.context
        workload = context.get("workload")
        values: dict[str, Any] = {}
        if self.render_code and isinstance(workload, Mapping):
            values.update(workload)  # upstream's bare workload names
        resolve = self.tool.resolve
        values.update({k: lazy(v, resolve) for k, v in context.items()})  # spilled results
        values["secrets"] = SECRETS
        values.update(self.p.names)
        values.update(self.p.results)
        return values | self._own(label, attempt)

    def _own(self, label: str, attempt: int) -> dict[str, Any]:
        return {
            "_prev": self.p.prev,
            "_task": label,
            "_attempt": attempt,
            "results": dict(self.p.results),
            "ctx": dict(self.p.ctx),
            "iter": dict(self.p.iter),
        }

    def _set(self, items: Mapping[str, Any], values: dict[str, Any], where: str) -> None:
        """Render each value of a `set` (a rule's or a task's) and store it: `ctx.<name>`
        in the execution's variables (returned to the engine), `iter.<name>` in the
        iteration's, any other name for the later tasks. Later names see earlier ones.
        A value that fails to render keeps its text, with a warning, as upstream NoETL
        does (its playbooks rely on it: a failed task's `set` still runs)."""
        for key, raw in items.items():
            try:
                value = self.tool.renderer.render(raw, values, field=f"{where}.{key}")
            except TemplateError as exc:
                log.warning("%s (its text is kept)", exc)
                value = raw
            scope, _, name = str(key).partition(".")
            if scope == "ctx" and name:
                self.p.ctx[name] = value
                self.p.ctx_patch[name] = value
                values["ctx"] = dict(self.p.ctx)
            elif scope == "iter" and name:
                self.p.iter[name] = value
                values["iter"] = dict(self.p.iter)
            elif str(key) not in _OWN:
                self.p.names[str(key)] = value
                values[str(key)] = value

    # --- the end --------------------------------------------------------------------------

    def _failed(
        self,
        outcome: Outcome,
        label: str,
        started: float,
        *,
        exhausted: int | None = None,
        decided: bool = False,
    ) -> Outcome:
        """The pipeline fails with the task's error. When a rule decided it (`fail`, or
        retries run out) the failure is final, `PolicyFailure` (the policy had its say:
        the engine must not run the pipeline again); else (no rule matched an error) it
        keeps the task's error type and retryability, as a task of its own would."""
        retry = None
        if exhausted is not None:
            reason = outcome.error or "its result still matched a retry rule"
            error = f"task '{label}' failed after {exhausted} attempts: {reason}"
            retry = {"task": label, "attempts": exhausted, "exhausted": True}
        else:
            error = f"task '{label}': {outcome.error or 'a rule failed it'}"
        final = decided or exhausted is not None
        return self._outcome(
            ok=False,
            started=started,
            this=outcome.this,
            error=error,
            error_type=POLICY_FAILURE if final else outcome.error_type,
            retryable=outcome.retryable and not final,
            retry=retry,
        )

    def _retry(self, outcome: Outcome, label: str, action: Action, started: float) -> Outcome:
        """The attempt ends asking the engine for a retry of the pipeline after the
        rule's delay; the next attempt resumes at this task (its checkpoint)."""
        tries = self.p.tries
        delay = retry_delay(action, tries)
        log.info(
            "pipeline %s: '%s' matched a retry rule (try %d of %d), again in %.2fs",
            self.task.task_id,
            label,
            tries,
            action.attempts,
            delay,
        )
        reason = outcome.error or "its result matched a retry rule"
        return self._outcome(
            ok=False,
            started=started,
            this=outcome.this,
            error=f"task '{label}' (try {tries} of {action.attempts}): {reason}",
            error_type=outcome.error_type or POLICY_RETRY,
            retryable=True,
            retry={"task": label, "try": tries, "attempts": action.attempts, "delay_s": delay},
        )

    def _outcome(
        self,
        *,
        ok: bool,
        started: float,
        this: Any = None,
        error: str | None = None,
        error_type: str | None = None,
        retryable: bool = False,
        retry: dict[str, Any] | None = None,
    ) -> Outcome:
        return Outcome(
            task_id=self.task.task_id,
            ok=ok,
            this=this,
            error=error,
            error_type=error_type,
            retryable=retryable,
            stdout="".join(self.stdout),
            duration_ms=(time.perf_counter() - started) * 1000,
            ctx=dict(self.p.ctx_patch),
            retry=retry,
            tasks=self.p.reported(),
        )
