"""Tools: what a worker runs for a task, looked up by the task's `kind`.

A tool turns a `Task` into an `Outcome` and reports failures in it rather than raising.
The registry wraps each tool, once, in a chain of middlewares (`noetl.worker.middleware`):
log context, observer, result selection and spill, script check, secret scope and masking, crash
capture, secret resolution, sinks, result bound and time limit. A stray exception still
becomes a failed outcome, so one buggy tool cannot take the worker loop down. What a tool
can do beyond running tasks (be canceled, be closed, wait, go without credentials) it
declares by the protocols of `noetl.tools.abilities`, read once when it is registered.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from noetl.core import Outcome, Task
from noetl.core.types import SINKS_KIND
from noetl.credentials.scope import SecretProvider
from noetl.dsl.kinds import plugin_tools
from noetl.extras import TOOL_EXTRAS
from noetl.observability import NOOP, Observer
from noetl.paths import Roots
from noetl.scripts import SCRIPT_CODE
from noetl.sinks import REGISTRY, SinkRegistry
from noetl.store.ports import CheckpointStore, ResultStore
from noetl.tools.abilities import Abilities, Tool
from noetl.tools.lazy import LazyTool
from noetl.worker.middleware import (
    CrashCapture,
    Handler,
    LogContext,
    Middleware,
    Observe,
    ResolveSecrets,
    ResultBound,
    ScriptCheck,
    SecretScope,
    SelectResult,
    Sinks,
    bounded,
    compose,
)
from noetl.worker.output import CaptureOutput, OutputListener
from noetl.worker.python_pool import PythonPool
from noetl.worker.selection import DEFAULT_INLINE_BYTES
from noetl.worker.time_limit import CANCEL_GRACE_S, TimeLimit

if TYPE_CHECKING:
    from noetl.tools.playbook import ChildLauncher

__all__ = [
    "NoopTool",
    "PythonTool",
    "SinksTool",
    "Tool",
    "ToolRegistry",
    "UnknownTool",
    "default_registry",
]

# The largest result a task may return (its JSON), unless the registry is given another.
DEFAULT_MAX_RESULT_BYTES = 16 * 1024 * 1024


class NoopTool:
    """Does nothing; its result is the task's rendered `args`."""

    kind: str = "noop"
    uses_credentials = False  # no secret scope needed unless the task has references

    def run(self, task: Task) -> Outcome:
        return Outcome(task_id=task.task_id, ok=True, this=task.args)


class SinksTool:
    """The tool of a `sinks` task (noetl.engine.handoff): its result is the `this` its
    tool's worker reported, which the task's sinks then write."""

    kind: str = SINKS_KIND
    uses_credentials = False

    def run(self, task: Task) -> Outcome:
        return Outcome(task_id=task.task_id, ok=True, this=task.args.get("this"))


class PythonTool:
    """User Python code, run in a child process of the pool (see `python_pool`)."""

    kind: str = "python"
    uses_credentials = False  # user code gets values through `args`, never credentials

    def __init__(self, pool: PythonPool) -> None:
        self._pool = pool

    @property
    def pool(self) -> PythonPool:
        """The child processes this tool runs code in."""
        return self._pool

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


@dataclass(frozen=True, slots=True)
class _Chains:
    """A tool's abilities and its composed chains: `run` (observed) and `call`, each
    full and short."""

    abilities: Abilities
    run: Handler
    run_short: Handler
    call: Handler
    call_short: Handler

    def of(self, task: Task, *, observed: bool) -> Handler:
        if task.secrets or task.sinks or self.abilities.uses_credentials:
            return self.run if observed else self.call
        # Nothing to resolve, hand out, mask or write: the short chain (a hot path for
        # loops of python items).
        return self.run_short if observed else self.call_short


class ToolRegistry:
    """Tools by kind, each wrapped once in the chain of middlewares that runs its tasks
    (`noetl.worker.middleware`), and the secret providers their tasks resolve against."""

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        secrets: SecretProvider | None = None,
        observer: Observer = NOOP,
        sinks: SinkRegistry | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        cancel_grace_s: float = CANCEL_GRACE_S,
        results: ResultStore | None = None,
        result_inline_bytes: int | None = DEFAULT_INLINE_BYTES,
        on_output: OutputListener | None = None,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        # Told each line a task prints or its tool logs, as it comes (noetl.worker.output).
        self._on_output = on_output
        self._chains: dict[str, _Chains] = {}
        # Where a task with `select` keeps its whole result (noetl.worker.selection), and
        # a task without, whose result is over `result_inline_bytes` of JSON (None: never).
        self._results = results
        self._inline_bytes = result_inline_bytes
        self._secrets = secrets
        # The sink writers of its tasks (None: the shared default registry).
        self._sinks = sinks
        # What a tool returns is refused past this size (or nested too deep, or holding a
        # number JSON cannot hold): see `bounded`.
        self._max_result_bytes = max_result_bytes
        # Told when each task's tool starts and finishes, and about each sink it writes.
        self._observer = observer
        # How long past its deadline a tool that can be stopped is asked to stop.
        self._grace_s = cancel_grace_s
        for tool in tools:
            self.register(tool)

    # The chains hold these: setting one composes them again.
    @property
    def secrets(self) -> SecretProvider | None:
        return self._secrets

    @secrets.setter
    def secrets(self, value: SecretProvider | None) -> None:
        self._secrets = value
        self._compose_all()

    @property
    def sinks(self) -> SinkRegistry | None:
        return self._sinks

    @sinks.setter
    def sinks(self, value: SinkRegistry | None) -> None:
        self._sinks = value
        self._compose_all()

    @property
    def results(self) -> ResultStore | None:
        return self._results

    @results.setter
    def results(self, value: ResultStore | None) -> None:
        self._results = value
        self._compose_all()

    @property
    def observer(self) -> Observer:
        return self._observer

    @observer.setter
    def observer(self, value: Observer) -> None:
        self._observer = value
        self._compose_all()

    @property
    def on_output(self) -> OutputListener | None:
        return self._on_output

    @on_output.setter
    def on_output(self, value: OutputListener | None) -> None:
        self._on_output = value
        self._compose_all()

    @property
    def max_result_bytes(self) -> int:
        return self._max_result_bytes

    @max_result_bytes.setter
    def max_result_bytes(self, value: int) -> None:
        self._max_result_bytes = value
        self._compose_all()

    @property
    def result_inline_bytes(self) -> int | None:
        return self._inline_bytes

    @result_inline_bytes.setter
    def result_inline_bytes(self, value: int | None) -> None:
        self._inline_bytes = value
        self._compose_all()

    def register(self, tool: Tool, *, replace: bool = False) -> None:
        """Add a tool (its abilities read and its chains composed now); a second tool for
        the same kind needs `replace=True`."""
        if tool.kind in self._tools and not replace:
            raise ValueError(f"a tool for kind {tool.kind!r} is already registered")
        self._tools[tool.kind] = tool
        self._chains[tool.kind] = self._compose(tool)

    def get(self, kind: str) -> Tool:
        """The tool for `kind`; for an unknown kind one whose tasks fail (`UnknownTool`)."""
        tool = self._tools.get(kind)
        return UnknownTool(kind) if tool is None else tool

    def abilities(self, kind: str) -> Abilities:
        """What the tool of `kind` can do beyond running tasks (`noetl.tools.abilities`)."""
        return self._chains_of(kind).abilities

    def middlewares(self, kind: str, *, observed: bool = True, short: bool = False) -> list[str]:
        """The names of the middlewares around the tool of `kind`, outermost first."""
        chain = self._middlewares(self.get(kind), observed=observed, short=short)
        return [type(middleware).__name__ for middleware in chain]

    def __contains__(self, kind: object) -> bool:
        return kind in self._tools

    def waits(self, kind: str) -> bool:
        """Whether tasks of `kind` spend their time waiting for other tasks (`playbook`
        waits for its child execution): runtimes run those outside their bounded task
        slots, so a waiting parent never holds the slot its child needs."""
        chains = self._chains.get(kind)
        return chains is not None and chains.abilities.waits

    def kinds(self) -> list[str]:
        """The registered kinds, sorted."""
        return sorted(self._tools)

    def cancel(self, task_id: str) -> bool:
        """Ask every tool that can stop a running task (`Cancellable`, such as the python
        tool) to stop `task_id`; never raises. True when one of them stopped it. The
        stopped call still returns its (failed) outcome."""
        stopped = False
        for chains in list(self._chains.values()):
            cancel = chains.abilities.cancel
            if cancel is None:
                continue
            try:
                stopped = cancel(task_id) is True or stopped
            except Exception:  # a tool bug must not take the caller down
                continue
        return stopped

    def close(self) -> None:
        """Release what the tools hold (`Closeable`: the http tool's connection pool);
        never raises."""
        for chains in list(self._chains.values()):
            close = chains.abilities.close
            if close is None:
                continue
            try:
                close()
            except Exception:  # one tool's failure must not keep the others open
                continue

    def run(self, task: Task) -> Outcome:
        """Run a task with the tool of its kind through its whole chain; never raises.

        The task's secret references are resolved first (a missing secret fails the task),
        the tool runs with the task's `SecretScope` current (`current_scope()`, for
        credentials) and within its `timeout_ms` (`noetl.tools.deadline`), and every
        secret value is masked in the outcome it returns. Log records of the call carry
        the task's context (`noetl.observability.logging`); the observer is told."""
        return self._chains_of(task.kind).of(task, observed=True)(task)

    def call(self, task: Task) -> Outcome:
        """Run a task inside another tool's task (a pipeline's): as `run` (its secret
        scope, its sinks, its time limit, its result bounded and masked), but not observed
        nor logged as a task of its own; never raises."""
        return self._chains_of(task.kind).of(task, observed=False)(task)

    def bounded(self, outcome: Outcome) -> Outcome:
        """The outcome as it may be reported (`noetl.worker.middleware.bounded`, with this
        registry's `max_result_bytes`)."""
        return bounded(outcome, self._max_result_bytes)

    # --- composing -------------------------------------------------------------------

    def _chains_of(self, kind: str) -> _Chains:
        chains = self._chains.get(kind)
        # An unknown kind is composed for its task alone: no kind is kept that was not
        # registered.
        return self._compose(UnknownTool(kind)) if chains is None else chains

    def _compose_all(self) -> None:
        self._chains = {kind: self._compose(tool) for kind, tool in self._tools.items()}

    def _compose(self, tool: Tool) -> _Chains:
        abilities = Abilities.of(tool)

        def chain(observed: bool, short: bool) -> Handler:
            middlewares = self._middlewares(
                tool, observed=observed, short=short, abilities=abilities
            )
            return compose(middlewares, tool.run)

        return _Chains(
            abilities=abilities,
            run=chain(True, False),
            run_short=chain(True, True),
            call=chain(False, False),
            call_short=chain(False, True),
        )

    def _middlewares(
        self,
        tool: Tool,
        *,
        observed: bool,
        short: bool,
        abilities: Abilities | None = None,
    ) -> list[Middleware]:
        """The chain around `tool`, outermost first (why this order: the docstring of
        noetl.worker.middleware)."""
        abilities = abilities or Abilities.of(tool)
        chain: list[Middleware] = []
        if observed:
            chain.append(LogContext())
            if self._observer is not NOOP:  # nothing to tell: no call to make
                chain.append(Observe(self._observer))
        # Only a task's own result is spilled: not a pipeline's tasks' (`call`), nor what a
        # tool returns because a step asked for it whole (`spills_result = False`).
        spill = observed and abilities.spills_result
        chain.append(SelectResult(self._results, self._inline_bytes if spill else None))
        if tool.kind in SCRIPT_CODE:
            chain.append(ScriptCheck())
        if not short:
            chain.append(SecretScope(self._secrets))
        if observed:
            # A pipeline's tasks (`call`) write to the output of the pipeline's attempt.
            chain.append(CaptureOutput(self._on_output))
        chain.append(CrashCapture())
        if not short:
            chain += [ResolveSecrets(), Sinks(self._sinks, self._observer)]
        time_limit = TimeLimit(abilities.cancel, grace_s=self._grace_s)
        chain += [ResultBound(self._max_result_bytes), time_limit]
        return chain


def default_registry(
    python_pool: PythonPool,
    *,
    secrets: SecretProvider | None = None,
    launcher: ChildLauncher | None = None,
    observer: Observer = NOOP,
    roots: Roots | None = None,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    results: ResultStore | None = None,
    checkpoints: CheckpointStore | None = None,
    result_inline_bytes: int | None = DEFAULT_INLINE_BYTES,
    on_output: OutputListener | None = None,
) -> ToolRegistry:
    """The built-in tools and the third-party tools of the `noetl.tools` entry point group
    (see `noetl.dsl.kinds.plugin_tools`), resolving secrets against `secrets`. The
    `playbook` tool is there when a `launcher` (how this process starts child
    executions) is given. `roots`: where the file sink writes and the `playbook` tool
    reads files (None: the working directory; see noetl.paths). A result over
    `max_result_bytes` fails its task. `results`: the result store of `result.select`,
    of the `artifact` tool and of results over `result_inline_bytes` of JSON, which are
    spilled there (None: none of them is available; None bytes: nothing is spilled).
    `checkpoints`: where a pipeline keeps its progress between attempts (None: in this
    process's memory). `on_output`: told each line a task prints or its tool logs, as it
    comes (noetl.worker.output)."""
    # the tools' libraries load only where tasks run
    from noetl.sinks.file import FileWriter  # noqa: PLC0415
    from noetl.tools.artifact import ArtifactTool  # noqa: PLC0415
    from noetl.tools.playbook import PlaybookTool  # noqa: PLC0415
    from noetl.worker.pipeline import PipelineTool  # noqa: PLC0415

    # httpx, psycopg and duckdb load with the first task of their tool (noetl.tools.lazy).
    builtins: list[Tool] = [
        NoopTool(),
        SinksTool(),
        PythonTool(python_pool),
        LazyTool("http", "noetl.tools.http:HttpTool"),
        LazyTool("postgres", "noetl.tools.postgres:PostgresTool"),
        LazyTool("duckdb", "noetl.tools.duckdb_tool:DuckdbTool", extra=TOOL_EXTRAS["duckdb"]),
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
        result_inline_bytes=result_inline_bytes,
        on_output=on_output,
    )
    if results is not None:
        registry.register(ArtifactTool(results))
    for tool in plugin_tools().values():
        registry.register(tool)
    registry.register(PipelineTool(registry, checkpoints=checkpoints))
    return registry
