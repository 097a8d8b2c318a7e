"""Read-only views of an execution for the API: its state folded from the event log.

A view is built from the store alone, into a state of its own, so it never touches the
orchestrator's cached state (another thread mutates that). Folding the log gives the
same steps, loop counters and context the engine sees, also while the execution runs
(the stored context is only written when it finishes).

`ViewCache` keeps the views of recently read executions and brings one up to date by
folding only the events appended since it was last read: a console polling a running
execution every second costs one row read and a few events, not the whole log.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar

from noetl.core import Event, EventType, HistoryPrunedError, NotFoundError
from noetl.decision.records import RunResult
from noetl.dsl.graph import EdgeSource, Graph, build_graph
from noetl.dsl.validate import load_playbook_text
from noetl.engine import Engine, ExecutionState, StepRun, fold
from noetl.runtime.step_runs import runs_of
from noetl.store.base import ExecutionRecord, Store

log = logging.getLogger("noetl.views")

T = TypeVar("T")
# Events read per store call while catching up, so memory stays flat on a long log.
EVENT_CHUNK = 1000


@dataclass
class Taken:
    """The edges followed so far, folded from events like the state is."""

    edges: set[tuple[str, str, bool]] = field(default_factory=set)
    completed: list[str] = field(default_factory=list)

    def fold(self, events: Iterable[Event]) -> None:
        """(from, to, compensating) for every edge followed: the `taken` lists of
        `next.evaluated` events, and compensating calls made during a rollback."""
        for event in events:
            if event.step is None:
                continue
            if event.type == EventType.NEXT_EVALUATED:
                self.edges.update(
                    (event.step, target, False) for target in event.payload.get("taken", [])
                )
            elif event.type == EventType.STEP_FINISHED and event.payload.get("status") == "ok":
                self.completed.append(event.step)
            elif event.type == EventType.STEP_CALLED and event.payload.get("compensating"):
                # A rollback compensates the steps that had succeeded; their edges to the
                # compensating step are the ones taken.
                self.edges.update((source, event.step, True) for source in self.completed)


def taken_edges(events: Iterable[Event]) -> set[tuple[str, str, bool]]:
    """(from, to, compensating) for every edge followed in `events`."""
    taken = Taken()
    taken.fold(events)
    return taken.edges


@dataclass(frozen=True)
class ExecutionView:
    """An execution's row, its graph (None if the stored text no longer loads), the
    state folded from its events, and the edges taken."""

    record: ExecutionRecord
    graph: Graph | None
    state: ExecutionState
    taken: set[tuple[str, str, bool]]

    def to_dict(self, now: float) -> dict[str, Any]:
        """What `noetl run --json` prints for the execution, plus where it came from and
        when (epoch seconds). A running execution's duration is measured up to `now`."""
        record, state = self.record, self.state
        started = state.started_at if state.started_at is not None else record.created_at
        result = RunResult(
            execution_id=record.execution_id,
            status=state.status,
            steps=state.step_summaries(),
            context=dict(state.context),
            started_at=started,
            finished_at=state.finished_at if state.finished_at is not None else now,
            error=state.error,
            ctx=dict(state.ctx),
        )
        out = result.to_dict()
        out.update(
            playbook_name=record.playbook_name,
            playbook_path=record.playbook_path,
            workload=dict(state.workload),
            created_at=record.created_at,
            updated_at=record.updated_at,
            finished_at=record.finished_at,
            parent_execution_id=record.parent_execution_id,
            last_seq=state.seq,
        )
        return out

    def graph_dict(self) -> dict[str, Any]:
        """Nodes with their status, loop counters and runs (`run`: the latest, `runs`: how
        many); edges with whether they were taken."""
        nodes = [
            {"id": name, **run.summary(), "run": run.run, "runs": runs_of(run)}
            for name, run in self.state.steps.items()
        ]
        if self.graph is None:
            return {"execution_id": self.record.execution_id, "nodes": nodes, "edges": []}
        edges = [
            {
                "from": edge.source,
                "to": edge.target,
                "when": edge.when,
                "mode": edge.mode,
                "origin": edge.origin.value,
                "taken": (edge.source, edge.target, edge.origin is EdgeSource.COMPENSATE)
                in self.taken,
            }
            for edge in self.graph.edges
        ]
        return {"execution_id": self.record.execution_id, "nodes": nodes, "edges": edges}


def iter_events(
    store: Store, execution_id: str, after_seq: int = 0, *, chunk: int = EVENT_CHUNK
) -> Iterator[Event]:
    """Every event after `after_seq`, read `chunk` at a time (stop early and the rest is
    never read); NotFoundError if there is no such execution."""
    while True:
        events = store.load_events(execution_id, after_seq=after_seq, limit=chunk)
        yield from events
        if len(events) < chunk:
            return
        after_seq = events[-1].seq


def load_view(store: Store, execution_id: str) -> ExecutionView | None:
    """The execution's view, or None if there is no such execution; HistoryPrunedError
    if retention deleted its history."""
    record = store.get_execution(execution_id)
    if record is None:
        return None
    if record.pruned_at is not None:
        raise HistoryPrunedError(execution_id, record.pruned_at)
    entry = _Entry.new(record)
    try:
        entry.catch_up(store)
    except NotFoundError as exc:  # deleted (pruned) between the two reads
        if isinstance(exc, HistoryPrunedError):
            raise
        return None
    return entry.view(record)


@dataclass
class _Entry:
    """A cached view's mutable part; `lock` serializes catching up and reading it."""

    graph: Graph | None
    state: ExecutionState
    taken: Taken
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def new(cls, record: ExecutionRecord) -> _Entry:
        graph = _graph(record.playbook_text, record.playbook_path or "<inline>")
        if graph is not None:
            state = Engine(graph).new_state(record.execution_id)
        else:
            state = ExecutionState.new(record.execution_id, ())
        return cls(graph=graph, state=state, taken=Taken())

    def catch_up(self, store: Store) -> None:
        events = list(iter_events(store, self.state.execution_id, self.state.seq))
        if self.graph is None:
            # No playbook to lay the steps out: the steps the log mentions, in order of
            # appearance, added as they show up.
            for name in dict.fromkeys(e.step for e in events if e.step is not None):
                self.state.steps.setdefault(name, StepRun())
        fold(self.state, events)
        self.taken.fold(events)

    def view(self, record: ExecutionRecord) -> ExecutionView:
        return ExecutionView(
            record=record, graph=self.graph, state=self.state, taken=self.taken.edges
        )


class ViewCache:
    """Views of the executions read most recently (LRU), each caught up on every read.

    The event log only grows, so a cached state plus the events after its sequence
    number is the state folded from scratch. Reads of one execution are serialized; a
    view is only used inside `read`, while its lock is held."""

    def __init__(self, store: Store, *, size: int = 64) -> None:
        self.store = store
        self.size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def read(self, execution_id: str, use: Callable[[ExecutionView], T]) -> T | None:
        """`use(view)` on the execution's current view; None if there is no such execution,
        HistoryPrunedError if retention deleted its history."""
        record = self.store.get_execution(execution_id)
        if record is None or record.pruned_at is not None:
            self._forget(execution_id)
            if record is not None and record.pruned_at is not None:
                raise HistoryPrunedError(execution_id, record.pruned_at)
            return None
        with self._lock:
            entry = self._entries.get(execution_id)
            if entry is not None:
                self._entries.move_to_end(execution_id)
        if entry is None:
            entry = _Entry.new(record)
        with entry.lock:
            try:
                entry.catch_up(self.store)
            except NotFoundError as exc:  # deleted (pruned) between the two reads
                self._forget(execution_id)
                if isinstance(exc, HistoryPrunedError):
                    raise
                return None
            self._remember(execution_id, entry)
            return use(entry.view(record))

    def _remember(self, execution_id: str, entry: _Entry) -> None:
        with self._lock:
            self._entries[execution_id] = entry
            self._entries.move_to_end(execution_id)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def _forget(self, execution_id: str) -> None:
        with self._lock:
            self._entries.pop(execution_id, None)


@lru_cache(maxsize=64)
def _graph(text: str, name: str) -> Graph | None:
    """The graph of stored playbook text (validated once per text); None if it does not
    load any more (a playbook stored by an older version, or no text at all)."""
    loaded = load_playbook_text(text, name)
    if not loaded.ok or loaded.playbook is None:
        log.warning("the stored playbook %s does not load; showing steps from its log", name)
        return None
    return build_graph(loaded.playbook)
