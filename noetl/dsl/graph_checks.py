"""Warnings about the shape of the step graph: W401 (a step no path reaches from the entry),
W403 (an edge of an exclusive `next` after one without `when`, so it never fires), W410 (an
edge that closes a cycle) and W411 (a step several steps call without a gate).
"""

from __future__ import annotations

from noetl.dsl.case_checks import Reporter
from noetl.dsl.graph import build_graph
from noetl.dsl.model import Playbook
from noetl.dsl.routing import BackEdge, Join, analyze

__all__ = ["graph_warnings"]


def _routing_warnings(report: Reporter, playbook: Playbook) -> None:
    """W410 for an edge that closes a cycle (its target runs again), W411 for a step that
    several steps call without a gate (not in upstream NoETL's dialect, where such a join
    waits for every branch that can still call it)."""
    found = analyze(playbook)
    for back in found.back_edges:
        report.add("W410", _back_edge_message(back), back.arc.path, warning=True)
    for join in [] if playbook.upstream else found.joins:
        report.add("W411", _join_message(join), ("workflow", join.position, "step"), warning=True)


def graph_warnings(report: Reporter, playbook: Playbook) -> None:
    """Every warning about the step graph of a valid playbook, W401, W410, W411, W403."""
    graph = build_graph(playbook)
    reachable = graph.reachable()
    for index, name in enumerate(step.step for step in playbook.workflow):
        if name not in reachable:
            report.add(
                "W401",
                f"step '{name}' is unreachable from the entry step '{graph.entry}'",
                ("workflow", index, "step"),
                warning=True,
            )
    _routing_warnings(report, playbook)
    for index, step in enumerate(playbook.workflow):
        if step.next is None or step.next.mode != "exclusive":
            continue
        for j, edge in enumerate(step.next.to[:-1]):
            if edge.when is None:
                report.add(
                    "W403",
                    f"in exclusive mode the edge to '{edge.step}' has no 'when', so the "
                    f"edges after it never fire",
                    ("workflow", index, "next", "to", j + 1, "step"),
                    warning=True,
                )
                break


def _back_edge_message(back: BackEdge) -> str:
    arc = back.arc
    what = "next" if arc.branch is None else "case next"
    if arc.source == arc.target:
        where = f"calls '{arc.target}' itself"
    else:
        where = f"goes back to '{arc.target}', closing the cycle {' -> '.join(back.cycle)}"
    return (
        f"{what} {where}: when this edge fires, '{arc.target}' runs again (a new run each "
        f"time, up to policy.max_runs); make sure a condition on the cycle ends it"
    )


def _join_message(join: Join) -> str:
    names = [f"'{name}'" for name in join.callers]
    callers = ", ".join(names[:-1]) + f" and {names[-1]}"
    both = "which can both run" if len(names) == 2 else "several of which can run together"
    return (
        f"called by {callers}, {both}, and without a when gate: the step runs "
        f"on the first call and the later ones are ignored; to wait for its callers, add "
        f'when: "{join.gate}"'
    )
