"""A plan's complexity (noetl.dsl.complexity) and the start's admission over
`complexity_refuse` (noetl.decision.complexity): pure, no store."""

from __future__ import annotations

from typing import Any

import pytest

from noetl.decision.complexity import admit
from noetl.dsl.complexity import FANOUT, SUB_PLAYBOOK, UNKNOWN_LOOP, estimate
from noetl.dsl.model import Playbook
from noetl.dsl.validate import load_playbook_text
from noetl.engine.options import EngineOptions
from noetl.errors import TooComplexError

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: p}\n"


def playbook(workflow: str, workload: str = "") -> Playbook:
    return load_playbook_text(
        HEAD + workload + "workflow:\n" + workflow, "p.yaml", check_names=False
    ).require()


def loop_of(collection: str) -> Playbook:
    return playbook(f"  - step: start\n    loop: {{collection: {collection!r}, element: item}}\n")


@pytest.mark.parametrize(
    ("collection", "workload", "items"),
    [
        ("[1, 2, 3]", {}, 3),  # a YAML list written in the playbook
        ("{{ range(40) }}", {}, 40),
        ("{{ range(7) | list }}", {}, 7),
        ("{{ workload.xs }}", {"xs": [1, 2]}, 2),
        ("{{ xs }}", {"xs": list(range(9))}, 9),
    ],
)
def test_a_loop_of_known_size_counts_its_items(
    collection: str, workload: dict[str, Any], items: int
) -> None:
    text = collection if collection.startswith("[") else repr(collection)
    found = estimate(
        playbook(f"  - step: start\n    loop: {{collection: {text}, element: item}}\n"), workload
    )
    assert (found.loops, found.loop_items, found.unknown_loops) == (1, items, 0)
    assert found.score == 1 + items


@pytest.mark.parametrize(
    ("collection", "workload"),
    [
        ("{{ result_of_a_step }}", {}),
        ("{{ workload.xs }}", {"xs": "not a list"}),
        ("{{ workload.xs }}", {}),
        ("{{ range(n) }}", {"n": 3}),
        ("{{ workload.xs | reverse }}", {"xs": [1]}),
    ],
)
def test_a_loop_of_unknown_size_weighs_as_much_as_unknown_loop(
    collection: str, workload: dict[str, Any]
) -> None:
    found = estimate(loop_of(collection), workload)
    assert (found.loops, found.loop_items, found.unknown_loops) == (1, 0, 1)
    assert found.score == 1 + UNKNOWN_LOOP


def test_edges_count_next_and_case_branches_and_the_widest_fan_out() -> None:
    found = estimate(
        playbook(
            """\
  - step: start
    case:
      - when: "{{ true }}"
        then: {next: [c]}
    next: [a, b]
  - step: a
    next: [c]
  - step: b
  - step: c
"""
        ),
        {},
    )
    assert (found.steps, found.edges, found.max_fanout) == (4, 4, 3)
    assert found.score == 4 + 4 + 3 * FANOUT


def test_a_sub_playbook_in_a_loop_counts_once_per_known_item() -> None:
    text = """\
  - step: start
    loop: {collection: "{{ workload.xs }}", element: n}
    tool: {kind: playbook, spec: {path: child}}
"""
    small = estimate(playbook(text), {"xs": [1]})
    big = estimate(playbook(text), {"xs": [1, 2, 3]})
    unknown = estimate(playbook(text), {})
    assert (small.sub_playbooks, big.sub_playbooks, unknown.sub_playbooks) == (1, 3, 1)
    assert big.score - small.score == 2 + 2 * SUB_PLAYBOOK  # two more items, two more calls
    assert unknown.score == 1 + UNKNOWN_LOOP + SUB_PLAYBOOK
    assert big.biggest().startswith("3 sub-playbook calls")


@pytest.mark.parametrize(("refuse", "refused"), [(None, False), (43, False), (42, True), (1, True)])
def test_a_start_at_or_over_complexity_refuse_is_refused(refuse: int | None, refused: bool) -> None:
    plan = loop_of("{{ range(41) }}")  # scores 1 + 41
    options = EngineOptions(complexity_refuse=refuse)
    if not refused:
        assert admit(plan, {}, options).score == 42
        return
    with pytest.raises(TooComplexError) as caught:
        admit(plan, {}, options)
    message = str(caught.value)
    assert "scores 42" in message and f"complexity.refuse is {refuse}" in message
    assert "41 loop items" in message
