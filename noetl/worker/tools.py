"""Tools: what a worker runs for a task, looked up by the task's `kind`.

A tool turns a `Task` into an `Outcome` and reports failures in it rather than raising;
`ToolRegistry.run` still turns a stray exception into a failed outcome, so one buggy tool
cannot take the worker loop down.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from noetl.core import Outcome, Task
from noetl.credentials.scope import SecretProvider, SecretScope, enter_scope, leave_scope
from noetl.dsl.kinds import plugin_tools
from noetl.dsl.limits import check_data
from noetl.observability import NOOP, Observer
from noetl.observability.logging import bind_task, reset_task
from noetl.paths import Roots
from noetl.scripts import SCRIPT_CODE
from noetl.sinks import REGISTRY, SinkRegistry, run_sinks
from noetl.store.ports import ResultStore
from noetl.worker.python_pool import PythonPool
from noetl.worker.selection import select_result

if TYPE_CHECKING:
    from noetl.tools.playbook import ChildLauncher

__all__ = [
    "NoopTool",
    "PythonTool",
    "Tool",
    "ToolRegistry",
    "UnknownTool",
    "default_registry",
]

# The largest result a task may return (its JSON), unless the registry is given another.
DEFAULT_MAX_RESULT_BYTES = 16 * 1024 * 1024


class Tool(Protocol):
    """Runs the tasks of one kind. A tool whose `uses_credentials` is False (the default
    is True) runs without a secret scope when its task has no secret references and no
    sinks."""

    kind: str

    def run(self, task: Task) -> Outcome:
        """Run the task; report every failure in the outcome."""
        ...


class NoopTool:
    """Does nothing; its result is the task's rendered `args`."""

    kind: str = "noop"
    uses_credentials = False  # no secret scope needed unless the task has references

    def run(self, task: Task) -> Outcome:
        return Outcome(task_id=task.task_id, ok=True, this=task.args)


class PythonTool:
    """User Python code, run in a child process of the pool (see `python_pool`)."""

    kind: str = "python"
    uses_credentials = False  # user code gets values through `args`, never credentials

    def __init__(self, pool: PythonPool) -> None:
        self._pool = pool

    def run(self, task: Task) -> Outcome:
        return self._pool.run(task)

    def cancel(self, task_id: str) -> bool:
        """Kill the child process running `task_id`, if any (see `PythonPool.cancel`)."""
        return self._pool.cancel(task_id)


class UnknownTool:
    """Stands in for a kind nothing is registered for: every task fails, fatally."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def run(self, task: Task) -> Outcome:
        return Outcome(
            task_id=task.task_id,
            ok=False,
            error=f"no tool registered for kind {self.kind!r}",
            error_type="FatalError",
        )


class ToolRegistry:
    """Tools by kind, and the secret providers their tasks resolve against."""

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        secrets: SecretProvider | None = None,
        observer: Observer = NOOP,
        sinks: SinkRegistry | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        results: ResultStore | None = None,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        # Where a task with `select` keeps its whole result (noetl.worker.selection).
        self.results = results
        self.secrets = secrets
        # The sink writers of its tasks (None: the shared default registry).
        self.sinks = sinks
        # What a tool returns is refused past this size (or nested too deep, or holding a
        # number JSON cannot hold): see `bounded`.
        self.max_result_bytes = max_result_bytes
        # Told when each task's tool starts and finishes, and about each sink it writes.
        self.observer = observer
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool, *, replace: bool = False) -> None:
        """Add a tool; a second tool for the same kind needs `replace=True`."""
        if tool.kind in self._tools and not replace:
            raise ValueError(f"a tool for kind {tool.kind!r} is already registered")
        self._tools[tool.kind] = tool

    def get(self, kind: str) -> Tool:
        """The tool for `kind`; for an unknown kind one whose tasks fail (`UnknownTool`)."""
        tool = self._tools.get(kind)
        return UnknownTool(kind) if tool is None else tool

    def __contains__(self, kind: object) -> bool:
        return kind in self._tools

    def waits(self, kind: str) -> bool:
        """Whether tasks of `kind` spend their time waiting for other tasks (`playbook`
        waits for its child execution): runtimes run those outside their bounded task
        slots, so a waiting parent never holds the slot its child needs."""
        return getattr(self._tools.get(kind), "waits", False) is True

    def kinds(self) -> list[str]:
        """The registered kinds, sorted."""
        return sorted(self._tools)

    def cancel(self, task_id: str) -> bool:
        """Ask every tool that can stop a running task (one with a `cancel(task_id)`
        method, such as the python tool) to stop `task_id`; never raises. True when one
        of them stopped it. The stopped call still returns its (failed) outcome."""
        stopped = False
        for tool in list(self._tools.values()):
            cancel = getattr(tool, "cancel", None)
            if not callable(cancel):
                continue
            try:
                stopped = cancel(task_id) is True or stopped
            except Exception:  # a tool bug must not take the caller down
                continue
        return stopped

    def close(self) -> None:
        """Release what the tools hold (the http tool's connection pool); never raises."""
        for tool in list(self._tools.values()):
            close = getattr(tool, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:  # one tool's failure must not keep the others open
                    continue

    def run(self, task: Task) -> Outcome:
        """Run a task with the tool of its kind; never raises.

        The task's secret references are resolved first (a missing secret fails the task),
        the tool runs with the task's `SecretScope` current (`current_scope()`, for
        credentials), and every secret value is masked in the outcome it returns. Log
        records of the call carry the task's context (`noetl.observability.logging`)."""
        observer = self.observer
        token = bind_task(task)
        started = time.perf_counter()
        try:
            observer.tool_started(task)
            outcome = self._run(task)
            observer.tool_finished(task, outcome, time.perf_counter() - started)
        finally:
            reset_task(token)
        return outcome

    def call(self, task: Task) -> Outcome:
        """Run a task inside another tool's task (a pipeline's): as `run` (its secret
        scope, its sinks, its result bounded and masked), but not observed nor logged as
        a task of its own; never raises."""
        return self._run(task)

    def _run(self, task: Task) -> Outcome:
        if task.select:
            return select_result(self._run_tool(task), task, self.results)
        return self._run_tool(task)

    def _run_tool(self, task: Task) -> Outcome:
        tool = self.get(task.kind)
        script = task.spec.get("script") if task.kind in SCRIPT_CODE else None
        if script is not None:
            return _unread_script(task, script)
        if not (task.secrets or task.sinks or getattr(tool, "uses_credentials", True)):
            # Nothing to resolve, hand out or mask: skip the scope (a hot path for loops
            # of python items).
            return self._run_plain(tool, task)
        started = time.perf_counter()
        scope = SecretScope(self.secrets)
        token = enter_scope(scope)
        try:
            outcome = self.bounded(tool.run(scope.resolve(task)))
            if outcome.ok and task.sinks:  # sinks write `out` while the scope is current
                report = run_sinks(task, outcome.this, registry=self.sinks, observer=self.observer)
                outcome = report.apply(outcome)
        except Exception as exc:  # a tool bug must cost one task, not the worker
            outcome = _crashed(task, exc, started)
        finally:
            leave_scope(token)
        return scope.mask_outcome(outcome)

    def _run_plain(self, tool: Tool, task: Task) -> Outcome:
        started = time.perf_counter()
        try:
            return self.bounded(tool.run(task))
        except Exception as exc:  # a tool bug must cost one task, not the worker
            return _crashed(task, exc, started)

    def bounded(self, outcome: Outcome) -> Outcome:
        """The outcome as it may be reported: a result nested deeper than a playbook may
        be, holding a NaN or an infinity (JSON, and PostgreSQL, cannot hold them) or over
        `max_result_bytes` of JSON fails the task, fatally, saying which and where.
        Checked before any sink writes the result, and before it reaches the store, the
        engine or the API, which would otherwise fail on it far from its cause. (A NUL
        character is kept: the stores hold it, see noetl.store._pg_nul.)"""
        problem = check_data(
            outcome.this, root="result", max_bytes=self.max_result_bytes, nul=False
        )
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


def _unread_script(task: Task, script: Any) -> Outcome:
    """A task whose `spec.script` file was not read when its execution started (the
    process that started it could not read script files): it cannot run here."""
    return Outcome(
        task_id=task.task_id,
        ok=False,
        error=f"{task.kind} tool: the script file {script!r} was not read into the "
        f"playbook when the execution started (see docs/dsl.md, script files)",
        error_type="FatalError",
    )


def _crashed(task: Task, exc: Exception, started: float) -> Outcome:
    """The failed outcome of a tool that raised instead of reporting its failure."""
    return Outcome(
        task_id=task.task_id,
        ok=False,
        error=f"tool {task.kind!r} failed: {type(exc).__name__}: {exc}",
        error_type=type(exc).__name__,
        retryable=getattr(exc, "retryable", False) is True,
        duration_ms=(time.perf_counter() - started) * 1000,
    )


def default_registry(
    python_pool: PythonPool,
    *,
    secrets: SecretProvider | None = None,
    launcher: ChildLauncher | None = None,
    observer: Observer = NOOP,
    roots: Roots | None = None,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    results: ResultStore | None = None,
) -> ToolRegistry:
    """The built-in tools and the third-party tools of the `noetl.tools` entry point group
    (see `noetl.dsl.kinds.plugin_tools`), resolving secrets against `secrets`. The
    `playbook` tool is there when a `launcher` (how this process starts child
    executions) is given. `roots`: where the file sink writes and the `playbook` tool
    reads files (None: the working directory; see noetl.paths). A result over
    `max_result_bytes` fails its task. `results`: the result store of `result.select`
    and of the `artifact` tool (None: neither is available)."""
    # the tools' libraries load only where tasks run
    from noetl.sinks.file import FileWriter  # noqa: PLC0415
    from noetl.tools.artifact import ArtifactTool  # noqa: PLC0415
    from noetl.tools.duckdb_tool import DuckdbTool  # noqa: PLC0415
    from noetl.tools.http import HttpTool  # noqa: PLC0415
    from noetl.tools.playbook import PlaybookTool  # noqa: PLC0415
    from noetl.tools.postgres import PostgresTool  # noqa: PLC0415
    from noetl.worker.pipeline import PipelineTool  # noqa: PLC0415

    builtins: list[Tool] = [
        NoopTool(),
        PythonTool(python_pool),
        HttpTool(),
        PostgresTool(),
        DuckdbTool(),
    ]
    roots = roots or Roots.here()
    if launcher is not None:
        builtins.append(PlaybookTool(launcher, root=roots.playbooks))
    # Its own file writer (with the root); every other kind from the shared registry.
    sinks = SinkRegistry([FileWriter(roots.sinks)], builtins=False, parent=REGISTRY)
    registry = ToolRegistry(
        builtins,
        secrets=secrets,
        observer=observer,
        sinks=sinks,
        max_result_bytes=max_result_bytes,
        results=results,
    )
    if results is not None:
        registry.register(ArtifactTool(results))
    for tool in plugin_tools().values():
        registry.register(tool)
    registry.register(PipelineTool(registry))
    return registry
