"""What routing does that a reader of the playbook may not expect, found statically.

* **Back-edges.** An edge that closes a cycle of the workflow graph (`fetch -> check ->
  fetch`) calls a step that has already run by the time it fires: a new run of it (the
  engine runs every step on a cycle again, up to `policy.max_runs`). The back-edges are the
  edges a depth-first walk from the entry step (then the `route_edge` target and the
  compensating steps), taking edges in written order, finds closing a cycle: a
  deterministic choice, so every reader of a playbook marks the same edges.
* **Ungated joins.** A step without a `when` gate that two or more steps call runs on the
  first call; the later ones are ignored. Callers that cannot both call it in one
  execution are not a join: two edges of one exclusive `next`, the success edge and the
  `fail('<step>')` edge of one step, or two steps only reached through such alternatives.

Two edges can both fire in one execution when there are two paths to them (each a chain
of calls from a root) that agree at every step they share: a step runs once, so where both
paths leave one step, they must leave it by edges that can fire together. `_Flow.compatible`
searches for such a pair of paths, stepping back from the later of the two edges in a
topological order of the graph without its back-edges. Edge conditions are not evaluated:
two conditional edges of an inclusive `next` are taken to be able to fire together.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from noetl.dsl.diagnostics import Path
from noetl.dsl.model import Condition, NextSpec, Playbook, Step
from noetl.dsl.templates import helper_call

# Pairs of edges one join check may look at before it gives up (and stays quiet).
_SEARCH_BUDGET = 200_000


@dataclass(frozen=True, slots=True)
class Arc:
    """A routing edge as the playbook writes it: from a step's own `next` (`branch` None) or
    from the `next` of one of its `case` branches."""

    source: str
    target: str
    path: Path  # of the edge's `step` key in the normalized document
    branch: int | None
    mode: str  # of the `next` block it is in
    outcome: str  # "ok" (fires only on success), "failed" (only on failure) or "any"


@dataclass(frozen=True, slots=True)
class BackEdge:
    """An edge closing a cycle; `cycle` runs from its target to its source."""

    arc: Arc
    cycle: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Join:
    """A step without a gate that several steps call, some of them in one execution."""

    step: str
    position: int
    callers: tuple[str, ...]
    gate: str  # a `when` that waits for the callers that run


def _outcome(when: Condition | None, source: str) -> str | None:
    """When an edge of a step's own `next` can fire: None for never (`when: false`)."""
    if when is None:
        return "ok"  # an edge without `when` fires only if the step succeeded
    if isinstance(when, bool):
        return "any" if when else None
    call = helper_call(when)
    if call is not None and call[1] == source and call[0] in ("ok", "fail"):
        return "ok" if call[0] == "ok" else "failed"
    return "any"


def _block_arcs(step: Step, block: NextSpec, base: Path, branch: int | None) -> Iterator[Arc]:
    for index, edge in enumerate(block.to):
        outcome = _outcome(edge.when, step.step) if branch is None else "any"
        if outcome is not None:
            path = (*base, "next", "to", index, "step")
            yield Arc(step.step, edge.step, path, branch, block.mode, outcome)


def step_arcs(step: Step, position: int) -> list[Arc]:
    """The edges a step can route by, in the order they are evaluated: the branches' first
    (none under `break_chain`, which takes no branch route), then its own."""
    arcs: list[Arc] = []
    base: Path = ("workflow", position)
    spec = step.spec
    if spec is None or spec.next_policy != "break_chain":
        for index, branch in enumerate(step.case or ()):
            if branch.then.next is not None and branch.when is not False:
                then = (*base, "case", index, "then")
                arcs.extend(_block_arcs(step, branch.then.next, then, index))
    if step.next is not None:
        arcs.extend(_block_arcs(step, step.next, base, None))
    return arcs


def _together(step: Step, a: Arc, b: Arc) -> bool:
    """Whether two edges of one step can both be taken when it finishes."""
    spec = step.spec
    end_step = spec is None or spec.next_policy == "end_step"
    if a.branch is None and b.branch is None:
        return a.mode == "inclusive" and {a.outcome, b.outcome} != {"ok", "failed"}
    if a.branch is None or b.branch is None:
        return not end_step  # end_step: a routing branch replaces the step's own next
    if a.branch == b.branch:
        return a.mode == "inclusive"
    # One routing branch at most: end_step stops at the first, exclusive acts on one.
    return not end_step and spec is not None and spec.case_mode == "inclusive"


@dataclass
class _Flow:
    """The graph of routing edges of the steps the roots reach, its back-edges, and an
    order of its steps in which every other edge goes forward."""

    playbook: Playbook
    steps: dict[str, Step] = field(default_factory=dict)
    arcs: dict[str, list[Arc]] = field(default_factory=dict)
    roots: list[str] = field(default_factory=list)
    back: list[BackEdge] = field(default_factory=list)
    order: dict[str, int] = field(default_factory=dict)  # topological position
    into: dict[str, list[str]] = field(default_factory=dict)  # forward callers of a step

    @classmethod
    def of(cls, playbook: Playbook) -> _Flow:
        steps = {step.step: step for step in playbook.workflow}
        flow = cls(playbook, steps)
        flow.arcs = {step.step: step_arcs(step, i) for i, step in enumerate(playbook.workflow)}
        candidates = [
            playbook.entry,
            playbook.policy.route_edge_target,
            *(step.compensate for step in playbook.workflow),
        ]
        for name in candidates:
            if name in steps and name not in flow.roots:
                flow.roots.append(name)
        flow._walk()
        return flow

    def _walk(self) -> None:
        """Depth first from each root, edges in order: back-edges and a postorder."""
        state: dict[str, int] = {}  # 1 on the stack, 2 done
        postorder: list[str] = []
        forward: list[Arc] = []
        for root in self.roots:
            if root in state:
                continue
            state[root] = 1
            stack: list[tuple[str, Iterator[Arc]]] = [(root, iter(self.arcs.get(root, ())))]
            while stack:
                name, pending = stack[-1]
                arc = next(pending, None)
                if arc is None:
                    stack.pop()
                    state[name] = 2
                    postorder.append(name)
                    continue
                seen = state.get(arc.target)
                if seen == 1:
                    names = [n for n, _ in stack]
                    cycle = (*names[names.index(arc.target) :], arc.target)
                    self.back.append(BackEdge(arc, cycle))
                    continue
                if arc.target not in self.arcs:
                    continue  # names no step: reported by the checks
                forward.append(arc)
                if seen is None:
                    state[arc.target] = 1
                    stack.append((arc.target, iter(self.arcs.get(arc.target, ()))))
        self.order = {name: i for i, name in enumerate(reversed(postorder))}
        for arc in forward:
            callers = self.into.setdefault(arc.target, [])
            if arc.source not in callers:
                callers.append(arc.source)

    def _compatible_at(self, source: str, first: str, second: str) -> bool:
        step = self.steps[source]
        arcs = self.arcs[source]
        one = [a for a in arcs if a.target == first]
        two = [a for a in arcs if a.target == second]
        return any(_together(step, a, b) for a in one for b in two)

    def compatible(self, first: tuple[str, str], second: tuple[str, str]) -> bool:
        """Whether the calls `first` and `second` ((caller, called) pairs) can both happen
        in one execution (see the module docstring). A search that runs out of budget
        answers False: a warning must not rest on a guess."""
        start = (first, second)
        todo = [start]
        seen = {start}
        while todo:
            a, b = todo.pop()
            if a == b:
                return True
            if a[0] == b[0]:
                if self._compatible_at(a[0], a[1], b[1]):
                    return True
                continue
            if self.order[a[0]] < self.order[b[0]]:
                a, b = b, a  # step back from the call whose caller comes later
            if a[0] in self.roots:
                return True  # a root can run without being called
            for caller in self.into.get(a[0], ()):
                pair = ((caller, a[0]), b)
                if pair not in seen:
                    if len(seen) >= _SEARCH_BUDGET:
                        return False
                    seen.add(pair)
                    todo.append(pair)
        return False


@dataclass(frozen=True, slots=True)
class Routing:
    """What `analyze` found."""

    back_edges: list[BackEdge]
    joins: list[Join]


def analyze(playbook: Playbook) -> Routing:
    """The back-edges and the ungated joins of a playbook, from one walk of its graph."""
    flow = _Flow.of(playbook)
    return Routing(flow.back, _joins(flow))


def back_edges(playbook: Playbook) -> list[BackEdge]:
    """The edges that close a cycle, in the order the walk meets them."""
    return _Flow.of(playbook).back


def ungated_joins(playbook: Playbook) -> list[Join]:
    """Steps without `when` that two or more steps call, where at least two of the calls
    can happen in one execution; each with a gate that would wait for its callers."""
    return _joins(_Flow.of(playbook))


def _joins(flow: _Flow) -> list[Join]:
    playbook = flow.playbook
    positions = {step.step: i for i, step in enumerate(playbook.workflow)}
    joins = []
    for position, step in enumerate(playbook.workflow):
        callers = sorted(flow.into.get(step.step, ()), key=positions.__getitem__)
        if step.when is not None or len(callers) < 2:
            continue
        together = {
            frozenset((a, b))
            for a, b in itertools.combinations(callers, 2)
            if flow.compatible((a, step.step), (b, step.step))
        }
        if together:
            gate = _gate(callers, together)
            joins.append(Join(step.step, position, tuple(callers), gate))
    return joins


def _gate(callers: list[str], together: set[frozenset[str]]) -> str:
    """A `when` that waits for the callers that run: callers that exclude each other are
    alternatives (`or`), the others are all waited for (`and`)."""
    parts = []
    for group in _components(callers, together):
        options = [
            " and ".join(f"done('{name}')" for name in clique)
            for clique in _cliques(group, together)
        ]
        if len(options) == 1:
            parts.append(options[0])
        else:
            options = [f"({o})" if " and " in o else o for o in options]
            parts.append(" or ".join(options))
    if len(parts) > 1:
        parts = [f"({p})" if " or " in p else p for p in parts]
    return "{{ " + " and ".join(parts) + " }}"


def _components(callers: list[str], together: set[frozenset[str]]) -> list[list[str]]:
    """Groups of callers linked by exclusion (pairs that cannot both call)."""
    groups: list[list[str]] = []
    for name in callers:
        linked = [g for g in groups if any(frozenset((name, o)) not in together for o in g)]
        merged = [name]
        for group in linked:
            groups.remove(group)
            merged = [*group, *merged]
        groups.append(sorted(merged, key=callers.index))
    return sorted(groups, key=lambda g: callers.index(g[0]))


def _cliques(group: list[str], together: set[frozenset[str]]) -> list[list[str]]:
    """The largest sets of callers of a group that can all call in one execution."""
    found: list[list[str]] = []

    def grow(clique: list[str], rest: list[str], done: list[str]) -> None:
        if not rest and not done:
            found.append(clique)
            return
        for name in list(rest):
            fits = [o for o in rest if frozenset((name, o)) in together]
            left = [o for o in done if frozenset((name, o)) in together]
            grow([*clique, name], fits, left)
            rest.remove(name)
            done.append(name)

    grow([], list(group), [])
    return found
