"""`Decider.load_many`: the states of many executions read together, in reads of at most
`LOAD_MANY` executions; a state already cached is neither read again nor replaced. And
`Decider.engine`: threads that want one new engine share its build."""

from __future__ import annotations

import threading
import time
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


def test_threads_that_want_one_new_engine_share_its_build(monkeypatch: Any) -> None:
    """The tasks of a claim of a new playbook: one builds its engine, the others wait for
    that build. A build that fails is tried again by each waiter, with its own error."""
    decider = Decider(MemoryStore())
    built: list[str] = []
    build = decider._build
    fail = threading.Event()

    def slow(text: str, path: Any, compiled: Any) -> Any:
        built.append(text)
        time.sleep(0.2)
        if fail.is_set():
            raise ValueError("bad playbook")
        return build(text, path, compiled)

    monkeypatch.setattr(decider, "_build", slow)

    def many(text: str) -> list[Any]:
        results: list[Any] = []

        def one() -> None:
            try:
                results.append(decider.engine(text, None))
            except ValueError as exc:
                results.append(exc)

        threads = [threading.Thread(target=one) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    engines = many(CHAIN)
    assert len(built) == 1 and len(engines) == 4
    assert all(engine is engines[0] for engine in engines)

    fail.set()
    errors = many(CHAIN.replace("chain", "other"))
    assert len(built) == 5  # the first build, and each waiter's own after it failed
    assert all(isinstance(error, ValueError) for error in errors)
