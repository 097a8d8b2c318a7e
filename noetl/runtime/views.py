"""Read-only views of an execution for the API: its state folded from the event log.

A view is built from the store alone, into a fresh state, so it never touches the
orchestrator's cached state (another thread mutates that). Folding the log gives the
same steps, loop counters and context the engine sees, also while the execution runs
(the stored context is only written when it finishes).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from noetl.dsl.graph import EdgeSource, Graph, build_graph
from noetl.dsl.validate import load_playbook_text
from noetl.engine import Engine, Event, EventType, ExecutionState, fold
from noetl.runtime.embedded import RunResult
from noetl.store.base import ExecutionRecord, NotFoundError, Store

log = logging.getLogger("noetl.views")


@dataclass(frozen=True)
class ExecutionView:
    """An execution's row, its graph (None if the stored text no longer loads), the
    state folded from its events, and those events."""

    record: ExecutionRecord
    graph: Graph | None
    state: ExecutionState
    events: list[Event]

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
        )
        out = result.to_dict()
        out.update(
            playbook_name=record.playbook_name,
            playbook_path=record.playbook_path,
            workload=dict(record.workload),
            created_at=record.created_at,
            updated_at=record.updated_at,
            finished_at=record.finished_at,
            parent_execution_id=record.parent_execution_id,
            last_seq=state.seq,
        )
        return out

    def graph_dict(self) -> dict[str, Any]:
        """Nodes with their status and loop counters; edges with whether they were taken."""
        summaries = self.state.step_summaries()
        nodes = [{"id": name, **summary} for name, summary in summaries.items()]
        if self.graph is None:
            return {"execution_id": self.record.execution_id, "nodes": nodes, "edges": []}
        taken = taken_edges(self.events)
        edges = [
            {
                "from": edge.source,
                "to": edge.target,
                "when": edge.when,
                "mode": edge.mode,
                "origin": edge.origin.value,
                "taken": (edge.source, edge.target, edge.origin is EdgeSource.COMPENSATE) in taken,
            }
            for edge in self.graph.edges
        ]
        return {"execution_id": self.record.execution_id, "nodes": nodes, "edges": edges}


def taken_edges(events: list[Event]) -> set[tuple[str, str, bool]]:
    """(from, to, compensating) for every edge followed: the `taken` lists of
    `next.evaluated` events, and compensating calls made during a rollback."""
    out: set[tuple[str, str, bool]] = set()
    completed: list[str] = []
    for event in events:
        if event.step is None:
            continue
        if event.type == EventType.NEXT_EVALUATED:
            out.update((event.step, target, False) for target in event.payload.get("taken", []))
        elif event.type == EventType.STEP_FINISHED and event.payload.get("status") == "ok":
            completed.append(event.step)
        elif event.type == EventType.STEP_CALLED and event.payload.get("compensating"):
            # A rollback compensates the steps that had succeeded; their edges to the
            # compensating step are the ones taken.
            out.update((source, event.step, True) for source in completed)
    return out


def load_view(store: Store, execution_id: str) -> ExecutionView | None:
    """The execution's view, or None if there is no such execution."""
    record = store.get_execution(execution_id)
    if record is None:
        return None
    try:
        events = store.load_events(execution_id)
    except NotFoundError:  # deleted between the two reads
        return None
    graph = _graph(record.playbook_text, record.playbook_path or "<inline>")
    if graph is not None:
        state = Engine(graph).new_state(execution_id)
    else:
        # No playbook to lay the steps out: the steps the log mentions, in order of appearance.
        names = dict.fromkeys(e.step for e in events if e.step is not None)
        state = ExecutionState.new(execution_id, names)
    fold(state, events)
    return ExecutionView(record=record, graph=graph, state=state, events=events)


@lru_cache(maxsize=64)
def _graph(text: str, name: str) -> Graph | None:
    """The graph of stored playbook text (validated once per text); None if it does not
    load any more (a playbook stored by an older version, or no text at all)."""
    loaded = load_playbook_text(text, name)
    if not loaded.ok or loaded.playbook is None:
        log.warning("the stored playbook %s does not load; showing steps from its log", name)
        return None
    return build_graph(loaded.playbook)
