"""The chain of middlewares around a tool call (noetl.worker.middleware): its order, and
what the order guarantees, seen from the outcome, the observer and the sinks."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from noetl.core import Outcome, Task
from noetl.core.secrets import marker
from noetl.credentials.scope import current_scope
from noetl.observability import NoopObserver
from noetl.observability import logging as obs_logging
from noetl.sinks import SinkRegistry
from noetl.tools.deadline import Deadline
from noetl.worker.middleware import compose
from noetl.worker.tools import NoopTool, ToolRegistry

SECRET = "s3cr3t-value-42"


class Secrets:
    def secret(self, name: str) -> str | None:
        return SECRET if name == "token" else None

    def credential(self, name: str) -> Mapping[str, Any] | None:
        return None


def make_task(kind: str, **changes: Any) -> Task:
    task = Task(
        task_id="t1",
        execution_id="e1",
        step="step",
        kind=kind,
        spec={},
        args={},
        context={"workload": {}},
        key="e1:step",
    )
    return dataclasses.replace(task, **changes)


class Tool:
    """Runs `behave(task)`; remembers the task it was given and its deadline."""

    def __init__(self, kind: str, behave: Any) -> None:
        self.kind = kind
        self.behave = behave
        self.seen: list[Task] = []
        self.deadlines: list[Deadline | None] = []

    def run(self, task: Task) -> Outcome:
        self.seen.append(task)
        self.deadlines.append(Deadline.of(task))
        result = self.behave(task)
        return Outcome(task.task_id, ok=True, this=result)


class Recorder(NoopObserver):
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def tool_started(self, task: Task) -> None:
        self.calls.append(("started", obs_logging._TASK.get()))

    def tool_finished(self, task: Task, outcome: Outcome, duration_s: float) -> None:
        self.calls.append(("finished", outcome))

    def sink_finished(
        self, task: Task, sink: Mapping[str, Any], summary: Mapping[str, Any]
    ) -> None:
        self.calls.append(("sink", dict(summary)))


class Written:
    kind = "memo"

    def __init__(self) -> None:
        self.values: list[Any] = []

    def write(self, value: Any, spec: Mapping[str, Any], key: str) -> dict[str, Any]:
        self.values.append(value)
        return {"rows": 1}


FULL = [
    "LogContext",
    "Observe",
    "SelectResult",
    "SecretScope",
    "CaptureOutput",
    "CrashCapture",
    "ResolveSecrets",
    "Sinks",
    "ResultBound",
    "TimeLimit",
]


def test_the_chain_order() -> None:
    registry = ToolRegistry([Tool("echo", lambda t: 1), NoopTool()], observer=Recorder())
    assert registry.middlewares("echo") == FULL
    # a pipeline's tasks write to the output of the pipeline's attempt
    assert registry.middlewares("echo", observed=False) == [
        name for name in FULL[2:] if name != "CaptureOutput"
    ]
    short = [
        "LogContext",
        "Observe",
        "SelectResult",
        "CaptureOutput",
        "CrashCapture",
        "ResultBound",
        "TimeLimit",
    ]
    assert registry.middlewares("noop", short=True) == short
    # the script check only around the kinds that read script files, right inside Observe
    assert registry.middlewares("python")[2:4] == ["SelectResult", "ScriptCheck"]
    assert "ScriptCheck" not in registry.middlewares("echo")
    # nothing to observe: no Observe
    assert "Observe" not in ToolRegistry([NoopTool()]).middlewares("noop")


def test_compose_puts_the_first_middleware_outermost() -> None:
    seen: list[str] = []

    def named(name: str) -> Any:
        def middleware(task: Task, call_next: Any) -> Outcome:
            seen.append(f"{name}>")
            outcome: Outcome = call_next(task)
            seen.append(f"<{name}")
            return outcome

        return middleware

    handler = compose([named("a"), named("b")], lambda t: Outcome(t.task_id, ok=True))
    assert handler(make_task("x")).ok
    assert seen == ["a>", "b>", "<b", "<a"]


def test_a_crash_quoting_a_secret_is_masked() -> None:
    """The scope wraps crash capture: the crash's message is masked like any outcome."""

    def leak(task: Task) -> Any:
        raise RuntimeError(f"bad token {task.args['t']}")

    registry = ToolRegistry([Tool("leaky", leak)], secrets=Secrets())
    task = make_task("leaky", args={"t": marker("token")}, secrets=("token",))
    outcome = registry.run(task)
    assert outcome.error == "tool 'leaky' failed: RuntimeError: bad token ***"
    assert outcome.error_type == "RuntimeError"


def test_a_missing_secret_fails_the_task_as_a_crash_would() -> None:
    tool = Tool("echo", lambda t: 1)
    registry = ToolRegistry([tool], secrets=Secrets())
    outcome = registry.run(make_task("echo", args={"t": marker("nope")}, secrets=("nope",)))
    assert not outcome.ok and outcome.error_type == "SecretError"
    assert outcome.error is not None and outcome.error.startswith("tool 'echo' failed: ")
    assert tool.seen == []  # the tool never ran


def test_the_observer_sees_the_final_outcome_inside_the_log_context() -> None:
    observer = Recorder()
    registry = ToolRegistry(
        [Tool("echo", lambda t: {"said": t.args["t"]})], secrets=Secrets(), observer=observer
    )
    task = make_task("echo", args={"t": marker("token")}, secrets=("token",))
    outcome = registry.run(task)
    assert outcome.this == {"said": "***"}
    assert observer.calls == [("started", task), ("finished", outcome)]
    assert obs_logging._TASK.get() is None  # reset after the call
    observer.calls.clear()
    registry.call(task)  # a pipeline's task: neither observed nor logged as a task
    assert observer.calls == []


def test_sinks_write_only_a_result_that_passed_the_bound() -> None:
    memo = Written()
    sinks = SinkRegistry([memo], builtins=False)
    registry = ToolRegistry([Tool("big", lambda t: "x" * 200)], sinks=sinks, max_result_bytes=100)
    sink = {"id": "m", "kind": "memo", "spec": {}}
    outcome = registry.run(make_task("big", sinks=(sink,)))
    assert outcome.error_type == "ResultRefused"
    assert memo.values == []
    small = ToolRegistry([Tool("small", lambda t: "ok")], sinks=sinks)
    written = small.run(make_task("small", sinks=(sink,)))
    assert written.ok and memo.values == ["ok"]
    assert [s["status"] for s in written.sinks] == ["ok"]


def test_sinks_see_the_scope_and_the_time_limit_leaves_them_out() -> None:
    """The sink runs inside the scope (it resolves its own markers) and after the time
    limit ended: a sink slower than the task's timeout does not time the task out."""
    seen: list[Any] = []

    class Slow(Written):
        def write(self, value: Any, spec: Mapping[str, Any], key: str) -> dict[str, Any]:
            seen.append((current_scope().mask(SECRET), spec["password"]))
            time.sleep(0.15)
            return {}

    registry = ToolRegistry(
        [Tool("echo", lambda t: 1)], secrets=Secrets(), sinks=SinkRegistry([Slow()], builtins=False)
    )
    sink = {"id": "m", "kind": "memo", "spec": {"password": marker("token")}}
    task = make_task("echo", sinks=(sink,), secrets=("token",), timeout_ms=50)
    outcome = registry.run(task)
    assert outcome.ok, outcome.error
    assert seen == [("***", SECRET)]


def test_the_tool_reads_the_deadline_the_time_limit_started() -> None:
    tool = Tool("echo", lambda t: 1)
    registry = ToolRegistry([tool])
    registry.run(make_task("echo", timeout_ms=5_000))
    registry.run(make_task("echo"))
    first, second = tool.deadlines
    assert first is not None and (first.task_id, first.timeout_ms) == ("t1", 5_000)
    assert 4.0 < first.remaining(first.at - 4.5) <= 4.5
    assert second is None


def test_setting_what_the_chains_hold_composes_them_again() -> None:
    registry = ToolRegistry([Tool("big", lambda t: "x" * 200)])
    secret_task = make_task("big", args={"t": marker("token")}, secrets=("token",))
    assert registry.run(secret_task).error_type == "SecretError"
    registry.secrets = Secrets()
    assert registry.run(secret_task).ok
    registry.max_result_bytes = 100
    assert registry.run(make_task("big")).error_type == "ResultRefused"
    observer = registry.observer = Recorder()
    registry.run(make_task("big"))
    assert [name for name, _ in observer.calls] == ["started", "finished"]
    memo = Written()
    registry.sinks = SinkRegistry([memo], builtins=False)
    registry.max_result_bytes = 1000
    registry.run(make_task("big", sinks=({"id": "m", "kind": "memo", "spec": {}},)))
    assert memo.values == ["x" * 200]


def test_the_observer_is_told_the_time_a_task_ran_before_its_chain() -> None:
    """A python task run ahead in a batch (noetl.worker.python_pool) reports the time it
    ran in its outcome; the chain around it took microseconds."""
    durations: list[float] = []

    class Timed(NoopObserver):
        def tool_finished(self, task: Task, outcome: Outcome, duration_s: float) -> None:
            durations.append(duration_s)

    class Ran:
        kind = "ran"

        def run(self, task: Task) -> Outcome:
            return Outcome(task.task_id, ok=True, this=1, duration_ms=250.0)

    registry = ToolRegistry([Ran()], observer=Timed())
    registry.run(make_task("ran"))
    assert durations and 0.25 <= durations[0] < 0.5
    durations.clear()
    registry = ToolRegistry([Tool("now", lambda t: 1)], observer=Timed())
    registry.run(make_task("now"))  # no duration of its own: the chain's time
    assert durations and durations[0] < 0.25
