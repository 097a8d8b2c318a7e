"""How complex an execution's plan is, estimated when it starts (seed 002's "too complex
then alert"). Pure: the playbook and the workload it starts with, nothing else.

What counts, each with its weight in the `score`:

| what | weight |
|---|---|
| a step | 1 |
| an edge (`next`, a case branch's `next`) | 1 |
| a loop item, when the loop's size is known at start | 1 |
| a loop whose size is not known at start (a template of a step's result) | `UNKNOWN_LOOP` |
| the widest fan-out (edges out of one step) | `FANOUT` each |
| a sub-playbook step (`tool.kind: playbook`), times its loop's size when known | `SUB_PLAYBOOK` |

A loop's size is known when its collection is a list written in the playbook, a template
that is only a workload key holding a list (`{{ workload.items }}`, `{{ items }}`), or
`range(N)` of a literal N (`{{ range(100) }}`, `{{ range(100) | list }}`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl.dsl.graph import Graph
from noetl.dsl.model import Playbook, Step

__all__ = ["FANOUT", "SUB_PLAYBOOK", "UNKNOWN_LOOP", "Complexity", "estimate", "too_complex"]

UNKNOWN_LOOP = 100
FANOUT = 5
SUB_PLAYBOOK = 50

_WORKLOAD_KEY = re.compile(r"^\{\{\s*(?:workload\.)?([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")
_RANGE = re.compile(r"^\{\{\s*range\(\s*(\d{1,9})\s*\)\s*(?:\|\s*list\s*)?\}\}$")


@dataclass(frozen=True, slots=True)
class Complexity:
    steps: int
    edges: int
    loops: int
    loop_items: int  # of the loops whose size is known at start
    unknown_loops: int
    max_fanout: int
    sub_playbooks: int  # sub-playbook calls, a loop's counted per known item
    score: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "steps": self.steps,
            "edges": self.edges,
            "loops": self.loops,
            "loop_items": self.loop_items,
            "unknown_loops": self.unknown_loops,
            "max_fanout": self.max_fanout,
            "sub_playbooks": self.sub_playbooks,
        }

    def biggest(self) -> str:
        """The contributions to the score, largest first (for a message)."""
        parts = [
            (self.steps, f"{self.steps} steps"),
            (self.edges, f"{self.edges} edges"),
            (self.loop_items, f"{self.loop_items} loop items"),
            (self.unknown_loops * UNKNOWN_LOOP, f"{self.unknown_loops} loops of unknown size"),
            (self.max_fanout * FANOUT, f"a fan-out of {self.max_fanout}"),
            (self.sub_playbooks * SUB_PLAYBOOK, f"{self.sub_playbooks} sub-playbook calls"),
        ]
        shown = [text for weight, text in sorted(parts, key=lambda p: -p[0]) if weight > 0]
        return ", ".join(shown[:3])


def estimate(playbook: Playbook, workload: Mapping[str, Any]) -> Complexity:
    """The plan's complexity, with the workload it starts with (which sizes its loops)."""
    edges = loops = items = unknown = fanout = subs = 0
    for step in playbook.workflow:
        out = _edges(step)
        edges += out
        fanout = max(fanout, out)
        size: int | None = 1
        if step.loop is not None:
            loops += 1
            size = _loop_size(step.loop.collection, workload)
            if size is None:
                unknown += 1
            else:
                items += size
        if step.tool is not None and step.tool.kind == "playbook":
            subs += size if size is not None else 1
    steps = len(playbook.workflow)
    score = steps + edges + items + unknown * UNKNOWN_LOOP + fanout * FANOUT + subs * SUB_PLAYBOOK
    return Complexity(steps, edges, loops, items, unknown, fanout, subs, score)


def _edges(step: Step) -> int:
    count = len(step.next.to) if step.next is not None else 0
    for branch in step.case or ():
        if branch.then.next is not None:
            count += len(branch.then.next.to)
    return count


def _loop_size(collection: Any, workload: Mapping[str, Any]) -> int | None:
    if isinstance(collection, list):
        return len(collection)
    if not isinstance(collection, str):
        return None
    text = collection.strip()
    ranged = _RANGE.match(text)
    if ranged is not None:
        return int(ranged.group(1))
    keyed = _WORKLOAD_KEY.match(text)
    if keyed is not None:
        value = workload.get(keyed.group(1))
        if isinstance(value, list):
            return len(value)
    return None


def too_complex(graph: Graph, workload: Mapping[str, Any], threshold: int) -> Complexity | None:
    """The plan's complexity when it scores `threshold` or more, else None."""
    found = estimate(graph.playbook, workload)
    return found if found.score >= threshold else None
