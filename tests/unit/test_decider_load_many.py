"""`Decider.load_many`: the states of many executions read together, in reads of at most
`LOAD_MANY` executions; a state already cached is neither read again nor replaced."""

from __future__ import annotations

from typing import Any

from noetl.decision.decider import Decider
from noetl.runtime.orchestrator import Orchestrator
from noetl.store.memory import MemoryStore
from noetl.store.records import LOAD_MANY

CHAIN = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chain}
workflow:
  - step: a
    tool: {kind: noop, args: {n: 1}}
"""


class Counted(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []

    def load_executions(self, execution_ids: Any, *, max_events: int) -> Any:
        self.reads.append(len(execution_ids))
        return super().load_executions(execution_ids, max_events=max_events)


def test_many_executions_are_read_in_bounded_reads_and_cached() -> None:
    store = Counted()
    starter = Orchestrator(store, owner="server")
    ids = [starter.start_execution(CHAIN) for _ in range(LOAD_MANY + 44)]
    decider = Decider(store)
    kept = decider.load(ids[0])
    assert kept is not None

    cached = decider.load_many([*ids, ids[1]], max_events=64)

    assert cached == len(ids) - 1
    assert store.reads == [LOAD_MANY, 43]  # the one cached already is not read
    assert decider.load(ids[0]) is kept
    for execution_id in ids[1:]:
        state = decider.load(execution_id)
        assert state is not None and state.state.seq == kept.state.seq
    assert decider.load_many(ids, max_events=64) == 0
    assert store.reads == [LOAD_MANY, 43]


def test_a_state_cached_while_they_are_read_is_kept() -> None:
    """A task's thread may load its execution while the claim's read is under way: the
    state it cached (and may be deciding on) stays the cached one."""
    store = Counted()
    ids = [Orchestrator(store, owner="server").start_execution(CHAIN) for _ in range(3)]
    decider = Decider(store)
    meanwhile: list[Any] = []
    read = store.load_executions

    def racing(execution_ids: Any, *, max_events: int) -> Any:
        found = read(execution_ids, max_events=max_events)
        meanwhile.append(decider.load(ids[0]))  # another thread, before the read returns
        return found

    store.load_executions = racing  # type: ignore[method-assign]

    assert decider.load_many(ids, max_events=64) == 2
    assert meanwhile[0] is not None and decider.load(ids[0]) is meanwhile[0]
