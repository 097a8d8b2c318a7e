"""The tool registry and the noop tool (no child processes here)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from noetl.core import Outcome, Task
from noetl.errors import RetryableError
from noetl.runtime.children import EmbeddedLauncher
from noetl.tools.playbook import PlaybookTool
from noetl.worker import tools
from noetl.worker.python_pool import PythonPool
from noetl.worker.tools import NoopTool, PythonTool, Tool, ToolRegistry, default_registry


def make_task(kind: str, args: dict[str, Any] | None = None) -> Task:
    return Task(
        task_id="t1",
        execution_id="e1",
        step="step",
        kind=kind,
        spec={},
        args=args if args is not None else {"a": 1, "nested": {"b": [1, 2]}},
        context={"workload": {}},
        key="e1:step",
    )


class EchoTool:
    def __init__(self, kind: str = "echo", result: Any = "echo") -> None:
        self.kind = kind
        self.result = result

    def run(self, task: Task) -> Outcome:
        return Outcome(task_id=task.task_id, ok=True, this=self.result)


class BrokenTool:
    kind = "broken"

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def run(self, task: Task) -> Outcome:
        raise self.exc


class FakePool:
    def __init__(self) -> None:
        self.tasks: list[Task] = []

    def run(self, task: Task) -> Outcome:
        self.tasks.append(task)
        return Outcome(task_id=task.task_id, ok=True, this="from pool")


def test_all_names_exist() -> None:
    assert sorted(tools.__all__) == tools.__all__
    for name in tools.__all__:
        assert hasattr(tools, name)


def test_noop_returns_its_args() -> None:
    task = make_task("noop")
    outcome = NoopTool().run(task)
    assert outcome == Outcome(task_id="t1", ok=True, this={"a": 1, "nested": {"b": [1, 2]}})
    assert NoopTool().run(make_task("noop", args={})).this == {}


def test_register_get_and_kinds() -> None:
    registry = ToolRegistry()
    assert registry.kinds() == []
    echo = EchoTool()
    registry.register(echo)
    registry.register(NoopTool())
    assert registry.kinds() == ["echo", "noop"]
    assert registry.get("echo") is echo
    assert "echo" in registry
    assert "http" not in registry
    assert registry.run(make_task("echo")).this == "echo"


def test_duplicate_kind_needs_replace() -> None:
    registry = ToolRegistry([EchoTool(result=1)])
    with pytest.raises(ValueError, match="a tool for kind 'echo' is already registered"):
        registry.register(EchoTool(result=2))
    assert registry.run(make_task("echo")).this == 1
    registry.register(EchoTool(result=2), replace=True)
    assert registry.run(make_task("echo")).this == 2


def test_unknown_kind_fails_fatally() -> None:
    registry = ToolRegistry([NoopTool()])
    expected = Outcome(
        task_id="t1",
        ok=False,
        error="no tool registered for kind 'x'",
        error_type="FatalError",
    )
    assert registry.run(make_task("x")) == expected
    assert registry.get("x").run(make_task("x")) == expected
    assert registry.get("x").kind == "x"
    assert "x" not in registry.kinds()


@pytest.mark.parametrize(
    ("exc", "error_type", "retryable"),
    [
        (RuntimeError("oops"), "RuntimeError", False),
        (RetryableError("flaky"), "RetryableError", True),
    ],
)
def test_a_tool_that_raises_costs_one_task(
    exc: Exception, error_type: str, retryable: bool
) -> None:
    outcome = ToolRegistry([BrokenTool(exc)]).run(make_task("broken"))
    assert not outcome.ok
    assert outcome.error == f"tool 'broken' failed: {error_type}: {exc}"
    assert (outcome.error_type, outcome.retryable) == (error_type, retryable)


def test_default_registry_has_the_built_in_tools() -> None:
    pool = FakePool()
    registry = default_registry(cast(PythonPool, pool))
    assert registry.kinds() == ["duckdb", "http", "noop", "pipeline", "postgres", "python", "sinks"]
    assert isinstance(registry.get("python"), PythonTool)
    task = make_task("python")
    assert registry.run(task).this == "from pool"
    assert pool.tasks == [task]
    assert registry.run(make_task("noop", args={"k": "v"})).this == {"k": "v"}


def test_default_registry_has_the_playbook_tool_given_a_launcher() -> None:
    launcher = EmbeddedLauncher()
    registry = default_registry(cast(PythonPool, FakePool()), launcher=launcher)
    assert "playbook" in registry.kinds()
    assert isinstance(registry.get("playbook"), PlaybookTool)
    # Its tasks wait for child executions: runtimes keep them out of their task slots.
    assert registry.waits("playbook")
    assert not registry.waits("python") and not registry.waits("nothing")


def test_tools_satisfy_the_protocol() -> None:
    checked: list[Tool] = [NoopTool(), EchoTool(), PythonTool(cast(PythonPool, FakePool()))]
    assert [tool.kind for tool in checked] == ["noop", "echo", "python"]


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("result", "needle"),
    [
        (_nested(900), "result[0][0]"),
        ({"v": float("nan")}, "result.v: is nan"),
        ("x" * 5000, "over the limit of 4096 bytes"),
    ],
)
def test_a_result_the_store_cannot_hold_fails_its_task_fatally(result: Any, needle: str) -> None:
    registry = ToolRegistry([EchoTool(result=result)], max_result_bytes=4096)
    outcome = registry.run(make_task("echo"))
    assert not outcome.ok and outcome.this is None
    assert outcome.error_type == "ResultRefused" and not outcome.retryable
    assert outcome.error is not None
    assert "the tool's result was refused" in outcome.error and needle in outcome.error


def test_a_nul_character_in_a_result_is_kept() -> None:
    kept = Outcome("t1", ok=True, this={"text": "a\x00b"}, stdout="x\x00y")
    assert ToolRegistry().bounded(kept) is kept
