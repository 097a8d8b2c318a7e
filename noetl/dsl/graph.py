"""The workflow graph: steps as nodes, `next` edges with their conditions and mode."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from noetl.dsl.model import Condition, Playbook, Step


class EdgeSource(StrEnum):
    NEXT = "next"
    CASE = "case"
    COMPENSATE = "compensate"
    POLICY = "policy"


@dataclass(frozen=True, slots=True)
class Edge:
    """A possible call from one step to another.

    `index` is the edge's position in its step's `next` list; `mode` is that list's mode.
    """

    source: str
    target: str
    when: Condition | None
    mode: str
    index: int
    origin: EdgeSource = EdgeSource.NEXT


@dataclass(frozen=True)
class Node:
    name: str
    step: Step
    position: int
    outgoing: tuple[Edge, ...]


@dataclass(frozen=True)
class Graph:
    playbook: Playbook
    entry: str
    nodes: dict[str, Node]
    edges: tuple[Edge, ...] = field(default=())

    @property
    def order(self) -> list[str]:
        """Step names in workflow order."""
        return [n.name for n in sorted(self.nodes.values(), key=lambda n: n.position)]

    def callers(self, name: str) -> list[Edge]:
        return [e for e in self.edges if e.target == name]

    def reachable(self) -> set[str]:
        """Steps the entry can reach along any edge (next, case, compensate, policy)."""
        policy_target = self.playbook.policy.route_edge_target
        seen = {self.entry}
        if policy_target in self.nodes:
            seen.add(policy_target)
        targets: dict[str, list[str]] = {}
        for edge in self.edges:
            targets.setdefault(edge.source, []).append(edge.target)
        queue = deque(seen)
        while queue:  # linear in the edges: a 10,000-step chain is walked in milliseconds
            for target in targets.get(queue.popleft(), ()):
                if target not in seen:
                    seen.add(target)
                    queue.append(target)
        return seen


def _step_edges(step: Step) -> list[Edge]:
    edges: list[Edge] = []
    if step.next is not None:
        for index, edge in enumerate(step.next.to):
            edges.append(Edge(step.step, edge.step, edge.when, step.next.mode, index))
    for branch_index, branch in enumerate(step.case or []):
        if branch.then.next is not None:
            for edge in branch.then.next.to:
                edges.append(
                    Edge(
                        step.step,
                        edge.step,
                        branch.when,
                        branch.then.next.mode,
                        branch_index,
                        EdgeSource.CASE,
                    )
                )
    if step.compensate:
        edges.append(Edge(step.step, step.compensate, None, "inclusive", -1, EdgeSource.COMPENSATE))
    return edges


def build_graph(playbook: Playbook) -> Graph:
    """Build the graph of a validated playbook (step names are unique by then)."""
    nodes: dict[str, Node] = {}
    all_edges: list[Edge] = []
    for position, step in enumerate(playbook.workflow):
        outgoing = tuple(_step_edges(step))
        nodes[step.step] = Node(step.step, step, position, outgoing)
        all_edges.extend(outgoing)
    return Graph(playbook=playbook, entry=playbook.entry, nodes=nodes, edges=tuple(all_edges))
