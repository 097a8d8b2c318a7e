"""The engine options reach every engine a runtime builds: the orchestrator's (a server),
a worker's continuation decider and the child executions its playbook tool starts."""

from __future__ import annotations

from noetl.decision.decider import Decider
from noetl.engine import EngineOptions
from noetl.runtime.children import StoreLauncher
from noetl.runtime.orchestrator import Orchestrator
from noetl.store import MemoryStore

PLAYBOOK = """\
metadata: {name: wired}
workflow:
  - step: start
    tool: {kind: python, code: "def main(context, args): return 1"}
"""
OPTIONS = EngineOptions(tool_timeout_ms=1234, on_step_fail="continue")


def queued_timeout(store: MemoryStore, execution_id: str) -> int | None:
    task = store.get_task(f"{execution_id}.start")
    assert task is not None
    timeout: int | None = task["payload"]["timeout_ms"]
    return timeout


def test_the_orchestrator_gives_its_options_to_the_engines_it_builds() -> None:
    store = MemoryStore()
    orchestrator = Orchestrator(store, owner="test", options=OPTIONS)
    execution_id = orchestrator.start_execution(PLAYBOOK)
    assert queued_timeout(store, execution_id) == 1234
    cached = orchestrator.decider.load(execution_id)
    assert cached is not None and cached.engine.policy.on_step_fail == "continue"
    plain = Orchestrator(store, owner="test").start_execution(PLAYBOOK)
    assert queued_timeout(store, plain) is None


def test_a_child_started_by_the_playbook_tool_gets_the_decider_options() -> None:
    store = MemoryStore()
    launcher = StoreLauncher(Decider(store, options=OPTIONS))
    assert launcher.launch(
        PLAYBOOK, path=None, workload={}, execution_id="child1", parent_execution_id="p"
    )
    assert queued_timeout(store, "child1") == 1234
