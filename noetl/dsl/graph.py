"""The workflow graph: steps as nodes, `next` edges with their conditions and mode."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

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

    @cached_property
    def components(self) -> dict[str, int]:
        """The strongly connected component of each step on a cycle of `next` and `case`
        edges (a step calling itself included), by a number; steps on no cycle are absent.

        An edge between two steps of one component can run its target again after the
        target finished (a back-edge, as in `fetch -> check -> fetch`, and the forward
        edges inside that loop); every other call keeps the at-most-once rule."""
        return _cycles(self)

    def on_cycle(self, source: str, target: str) -> bool:
        """Whether an edge from `source` to `target` lies on a cycle of the graph."""
        component = self.components.get(target)
        return component is not None and self.components.get(source) == component

    @cached_property
    def joins(self) -> dict[str, frozenset[str]]:
        """Each step two or more other steps call along `next` or `case` edges (a join),
        off any cycle with them, with the steps that can reach it: while one of those is
        still running, a join in upstream NoETL's dialect waits (noetl.engine.flow)."""
        callers: dict[str, set[str]] = {}
        sources: dict[str, list[str]] = {}
        for edge in self.edges:
            if edge.origin in (EdgeSource.NEXT, EdgeSource.CASE) and edge.target in self.nodes:
                sources.setdefault(edge.target, []).append(edge.source)
                if edge.source != edge.target and not self.on_cycle(edge.source, edge.target):
                    callers.setdefault(edge.target, set()).add(edge.source)
        found: dict[str, frozenset[str]] = {}
        for name, direct in callers.items():
            if len(direct) < 2:
                continue
            seen: set[str] = set()
            queue = deque(direct)
            while queue:  # every step a path of edges leads from to the join
                source = queue.popleft()
                if source in seen or source == name:
                    continue
                seen.add(source)
                queue.extend(sources.get(source, ()))
            found[name] = frozenset(seen)
        return found

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


def _cycles(graph: Graph) -> dict[str, int]:
    targets: dict[str, list[str]] = {name: [] for name in graph.nodes}
    for edge in graph.edges:
        if edge.origin in (EdgeSource.NEXT, EdgeSource.CASE) and edge.target in graph.nodes:
            targets[edge.source].append(edge.target)
    return _Tarjan(targets).run()


class _Tarjan:
    """Tarjan's strongly connected components, without recursion (a 10,000-step chain
    is one pass); only components that hold a cycle are kept."""

    def __init__(self, targets: dict[str, list[str]]) -> None:
        self.targets = targets
        self.index: dict[str, int] = {}
        self.low: dict[str, int] = {}
        self.stack: list[str] = []
        self.on_stack: set[str] = set()
        self.found: dict[str, int] = {}
        self.components = 0

    def run(self) -> dict[str, int]:
        for root in self.targets:
            if root not in self.index:
                self._walk(root)
        return self.found

    def _walk(self, root: str) -> None:
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            name, child = work.pop()
            if child == 0:
                self.index[name] = self.low[name] = len(self.index)
                self.stack.append(name)
                self.on_stack.add(name)
            children = self.targets[name]
            if child < len(children):
                work.append((name, child + 1))
                target = children[child]
                if target not in self.index:
                    work.append((target, 0))
                elif target in self.on_stack:
                    self.low[name] = min(self.low[name], self.index[target])
                continue
            if self.low[name] == self.index[name]:
                self._pop_component(name)
            if work:
                parent = work[-1][0]
                self.low[parent] = min(self.low[parent], self.low[name])

    def _pop_component(self, name: str) -> None:
        members: list[str] = []
        while True:
            member = self.stack.pop()
            self.on_stack.discard(member)
            members.append(member)
            if member == name:
                break
        if len(members) > 1 or name in self.targets[name]:
            for member in members:
                self.found[member] = self.components
            self.components += 1
