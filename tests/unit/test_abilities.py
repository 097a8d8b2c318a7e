"""The optional abilities of a tool (noetl.tools.abilities), read once when it is
registered: cancel, close, waits, uses_credentials."""

from __future__ import annotations

from typing import Any, cast

from noetl.core import Outcome, Task
from noetl.runtime.children import EmbeddedLauncher
from noetl.tools.abilities import Abilities, Cancellable, Closeable, CredentialAware, Waiting
from noetl.tools.http import HttpTool
from noetl.tools.playbook import PlaybookTool
from noetl.worker.python_pool import PythonPool
from noetl.worker.tools import NoopTool, PythonTool, ToolRegistry


class Plain:
    """A third-party tool with nothing but `kind` and `run`."""

    kind = "plain"

    def run(self, task: Task) -> Outcome:
        return Outcome(task.task_id, ok=True)


class Able(Plain):
    kind = "able"
    waits = True
    uses_credentials = False

    def __init__(self, *, stops: bool = True, fails: bool = False) -> None:
        self.stops = stops
        self.fails = fails
        self.canceled: list[str] = []
        self.closed = 0

    def cancel(self, task_id: str) -> bool:
        self.canceled.append(task_id)
        if self.fails:
            raise RuntimeError("cannot cancel")
        return self.stops

    def close(self) -> None:
        self.closed += 1
        if self.fails:
            raise RuntimeError("cannot close")


class Odd(Plain):
    """Attributes by the right names but of the wrong kind: none of them counts."""

    kind = "odd"
    cancel = "not a method"
    close = None
    waits = "yes"
    uses_credentials = 0


def test_the_protocols_are_structural() -> None:
    able, plain = Able(), Plain()
    assert all(isinstance(able, p) for p in (Cancellable, Closeable, Waiting, CredentialAware))
    assert not any(isinstance(plain, p) for p in (Cancellable, Closeable, Waiting))
    assert not isinstance(plain, CredentialAware)


def test_abilities_of_a_plain_tool_are_the_defaults() -> None:
    assert Abilities.of(Plain()) == Abilities(None, None, waits=False, uses_credentials=True)
    assert Abilities.of(Odd()) == Abilities(None, None, waits=False, uses_credentials=True)


def test_abilities_of_the_built_in_tools() -> None:
    pool = cast(PythonPool, object())
    python = Abilities.of(PythonTool(pool))
    assert python.cancel is not None and python.close is None
    assert (python.waits, python.uses_credentials) == (False, False)
    http = Abilities.of(HttpTool())
    assert http.close is not None and http.cancel is None and http.uses_credentials
    playbook = Abilities.of(PlaybookTool(EmbeddedLauncher()))
    assert playbook.waits
    assert not Abilities.of(NoopTool()).uses_credentials


def test_the_registry_cancels_closes_and_asks_through_the_abilities() -> None:
    able, failing = Able(stops=False), Able(fails=True)
    failing.kind = "failing"
    registry = ToolRegistry([Plain(), able, failing])
    assert registry.cancel("t9") is False  # asked both; neither stopped it (one raised)
    assert able.canceled == failing.canceled == ["t9"]
    able.stops = True
    assert registry.cancel("t9") is True
    registry.close()
    assert (able.closed, failing.closed) == (1, 1)
    assert registry.waits("able") and not registry.waits("plain")
    assert not registry.waits("unknown")
    assert registry.abilities("able").uses_credentials is False


def test_abilities_are_read_when_the_tool_is_registered() -> None:
    able = Able()
    registry = ToolRegistry([able])
    cast(Any, able).waits = False  # too late: the registry classified it already
    assert registry.waits("able")
    registry.register(able, replace=True)
    assert not registry.waits("able")


def test_a_tool_without_credentials_takes_the_short_chain() -> None:
    registry = ToolRegistry([Able(), Plain()])
    task = Task("t1", "e1", "s", "able", {}, {}, {}, "e1:s")
    able = registry._chains_of("able")
    assert able.of(task, observed=True) is able.run_short
    assert able.of(task, observed=False) is able.call_short
    with_secret = Task("t1", "e1", "s", "able", {}, {}, {}, "e1:s", secrets=("x",))
    assert able.of(with_secret, observed=True) is able.run
    plain = registry._chains_of("plain")
    assert plain.of(Task("t1", "e1", "s", "plain", {}, {}, {}, "e1:s"), observed=True) is plain.run
