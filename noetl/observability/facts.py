"""What observers need to know about a playbook and a batch of committed events.

Events say what happened; a few things an observer reports need the playbook too (the
workflow's name, which steps have a `when` gate, the tool kind of a step, an edge's
condition). `facts_of(graph)` computes them once per playbook graph.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

from noetl.dsl.graph import Graph

__all__ = ["PlaybookFacts", "facts_of"]


@dataclass(frozen=True, slots=True)
class PlaybookFacts:
    workflow: str  # metadata.name: the `workflow` label of metrics
    ref: str  # metadata.path, else the name: the `workflow_ref` of log lines
    gated: frozenset[str]  # steps with a `when` gate
    when: dict[str, str]  # the gate's expression (as text) by step
    kinds: dict[str, str]  # the tool kind of each step with a tool (a workbook: its task's)
    loops: frozenset[str]
    # The condition of each step's `next` edges, as text (None: the edge has none).
    edges: dict[str, tuple[str | None, ...]]
    results: dict[str, dict[str, Any]]  # `as` / `collect` of each step that keeps results


def _facts(graph: Graph) -> PlaybookFacts:
    playbook = graph.playbook
    kinds: dict[str, str] = {}
    results: dict[str, dict[str, Any]] = {}
    for step in playbook.workflow:
        if step.tool is not None:
            kind = step.tool.kind
            if kind == "workbook":
                with contextlib.suppress(KeyError):
                    kind = playbook.task(str(step.tool.spec.get("name"))).tool.kind
            kinds[step.step] = kind
        if step.result is not None and (step.result.as_ or step.result.collect):
            kept: dict[str, Any] = {}
            if step.result.as_:
                kept["as"] = step.result.as_
            if step.result.collect is not None:
                kept["collect"] = {
                    "into": step.result.collect.into,
                    "mode": step.result.collect.mode,
                }
            results[step.step] = kept
    return PlaybookFacts(
        workflow=playbook.metadata.name,
        ref=playbook.metadata.path or playbook.metadata.name,
        gated=frozenset(s.step for s in playbook.workflow if s.when is not None),
        when={s.step: str(s.when) for s in playbook.workflow if s.when is not None},
        kinds=kinds,
        loops=frozenset(s.step for s in playbook.workflow if s.loop is not None),
        edges={
            s.step: tuple(None if e.when is None else str(e.when) for e in s.edges)
            for s in playbook.workflow
            if s.edges
        },
        results=results,
    )


_CACHE: dict[int, tuple[Graph, PlaybookFacts]] = {}
_CACHE_LIMIT = 1024
_LOCK = threading.Lock()


def facts_of(graph: Graph) -> PlaybookFacts:
    """The facts of the graph's playbook, computed once per graph."""
    cached = _CACHE.get(id(graph))
    if cached is not None and cached[0] is graph:
        return cached[1]
    facts = _facts(graph)
    with _LOCK:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[id(graph)] = (graph, facts)  # the graph is held, so its id is not reused
    return facts
