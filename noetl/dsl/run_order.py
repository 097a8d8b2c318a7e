"""Which steps can run before which: the order the name checks read saved values in.

A step can run before another when a path of calls leads from it to the other (`next`,
`case` routes, `compensate`, `policy.on_step_fail: route_edge:<step>`, which any step's
failure may take), or when the other waits for it: a gate or an edge's condition that
names it (`when: "{{ done('a') }}"`: `a` has finished by then).

The steps before each step are a bit set (a Python int, bit `i` for the `i`-th step),
computed once for the whole workflow by propagating along calls until nothing changes,
so a 10,000-step chain costs one pass, not a walk per question.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from noetl.dsl.model import Playbook
from noetl.dsl.templates import is_template, step_references

__all__ = ["RunOrder"]


class RunOrder:
    """The steps that can run before each step of a playbook."""

    def __init__(self, playbook: Playbook) -> None:
        self.names = [step.step for step in playbook.workflow]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.callers: dict[str, set[str]] = {}
        self._calls(playbook)
        self._before: dict[str, int] | None = None

    def _calls(self, playbook: Playbook) -> None:
        steps = playbook.workflow
        for step in steps:
            self._waits(step.step, step.when)
            edges = list(step.next.to) if step.next else []
            for branch in step.case or ():
                if branch.then.next is not None:
                    edges.extend(branch.then.next.to)
                    for edge in branch.then.next.to:
                        self._waits(edge.step, branch.when)
            for edge in edges:
                self._waits(edge.step, edge.when)
            targets = [edge.step for edge in edges]
            if step.compensate:
                targets.append(step.compensate)
            for target in targets:
                self.callers.setdefault(target, set()).add(step.step)
        route = playbook.policy.route_edge_target
        if route is not None:
            self.callers.setdefault(route, set()).update(s.step for s in steps)

    def _waits(self, step: str, condition: object) -> None:
        if isinstance(condition, str) and is_template(condition):
            waited = {ref.name for ref in step_references(condition)}
            self.callers.setdefault(step, set()).update(waited)

    def bits(self, names: Iterable[str]) -> int:
        """The bit set of the named steps (names that are not steps are left out)."""
        out = 0
        for name in names:
            if name in self.index:
                out |= 1 << self.index[name]
        return out

    def before(self, step: str) -> int:
        """The bit set of the steps that can run before `step` (itself, on a cycle)."""
        if self._before is None:
            self._before = self._propagate()
        return self._before.get(step, 0)

    def _propagate(self) -> dict[str, int]:
        callees: dict[str, list[str]] = {}
        for target, callers in self.callers.items():
            for caller in callers:
                if caller in self.index and target in self.index:
                    callees.setdefault(caller, []).append(target)
        before = dict.fromkeys(self.names, 0)
        queue = deque(self._walk_order(callees))
        queued = set(queue)
        while queue:
            name = queue.popleft()
            queued.discard(name)
            reach = before[name] | (1 << self.index[name])
            for target in callees.get(name, ()):
                if reach & ~before[target]:
                    before[target] |= reach
                    if target not in queued:
                        queued.add(target)
                        queue.append(target)
        return before

    def _walk_order(self, callees: dict[str, list[str]]) -> list[str]:
        """The steps in the order a walk from the first step along calls meets them, then
        the rest in workflow order: most steps are then visited once."""
        order: list[str] = []
        seen: set[str] = set()
        for root in self.names:
            if root in seen:
                continue
            seen.add(root)
            walk = deque([root])
            while walk:
                name = walk.popleft()
                order.append(name)
                for target in callees.get(name, ()):
                    if target not in seen:
                        seen.add(target)
                        walk.append(target)
        return order
