"""build_graph: nodes, edges (when, mode, index, origin), the entry step and reachability."""

from __future__ import annotations

from noetl.dsl import Edge, Graph, Playbook, build_graph, load_playbook_text
from noetl.dsl.graph import EdgeSource

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: graph
"""


def playbook(body: str) -> Playbook:
    result = load_playbook_text(HEAD + body, "graph.yaml")
    assert result.ok, [d.format() for d in result.errors]
    return result.require()


def graph(body: str) -> Graph:
    return build_graph(playbook(body))


def test_nodes_keep_workflow_order_and_position() -> None:
    g = graph(
        """\
workflow:
  - step: b
    next: a
  - step: a
    next: c
  - step: c
"""
    )
    assert g.order == ["b", "a", "c"]
    assert [(n.name, n.position) for n in g.nodes.values()] == [("b", 0), ("a", 1), ("c", 2)]
    assert g.nodes["a"].step.step == "a"
    assert g.nodes["c"].outgoing == ()


def test_edges_carry_when_mode_and_index() -> None:
    g = graph(
        """\
workflow:
  - step: start
    next:
      mode: exclusive
      to:
        - step: big
          when: "{{ workload.n > 10 }}"
        - step: small
  - step: big
    next: [done_a, done_b]
  - step: small
    next:
      spec: {mode: exclusive}
      arcs:
        - step: done_a
          when: "{{ fail('small') }}"
  - step: done_a
  - step: done_b
"""
    )
    assert g.edges == (
        Edge("start", "big", "{{ workload.n > 10 }}", "exclusive", 0),
        Edge("start", "small", None, "exclusive", 1),
        Edge("big", "done_a", None, "inclusive", 0),
        Edge("big", "done_b", None, "inclusive", 1),
        Edge("small", "done_a", "{{ fail('small') }}", "exclusive", 0),
    )
    assert g.nodes["start"].outgoing == g.edges[:2]
    assert [e.source for e in g.callers("done_a")] == ["big", "small"]
    assert g.callers("start") == []
    assert all(e.origin is EdgeSource.NEXT for e in g.edges)


def test_case_and_compensate_edges() -> None:
    g = graph(
        """\
workflow:
  - step: start
    compensate: undo
    case:
      - when: "{{ workload.x }}"
        then:
          next: [left]
      - when: true
        then:
          next: {mode: exclusive, to: [right]}
  - step: left
  - step: right
  - step: undo
"""
    )
    assert g.edges == (
        Edge("start", "left", "{{ workload.x }}", "inclusive", 0, EdgeSource.CASE),
        Edge("start", "right", True, "exclusive", 1, EdgeSource.CASE),
        Edge("start", "undo", None, "inclusive", -1, EdgeSource.COMPENSATE),
    )
    assert g.reachable() == {"start", "left", "right", "undo"}


def test_entry_is_the_step_named_start() -> None:
    g = graph(
        """\
workflow:
  - step: first
  - step: start
    next: first
"""
    )
    assert g.entry == "start"
    assert g.reachable() == {"start", "first"}


def test_entry_is_the_first_step_without_start() -> None:
    g = graph(
        """\
workflow:
  - step: begin
    next: end
  - step: end
"""
    )
    assert g.entry == "begin"
    assert g.reachable() == {"begin", "end"}


def test_reachable_follows_edges_and_the_policy_route() -> None:
    pb = playbook(
        """\
policy:
  on_step_fail: route_edge:cleanup
workflow:
  - step: start
    next: a
  - step: a
  - step: orphan
    next: orphan_child
  - step: orphan_child
  - step: cleanup
    next: report
  - step: report
"""
    )
    g = build_graph(pb)
    assert g.reachable() == {"start", "a", "cleanup", "report"}


def test_cycles_terminate() -> None:
    g = graph(
        """\
workflow:
  - step: start
    next: loop_back
  - step: loop_back
    next:
      - step: start
        when: "{{ false }}"
"""
    )
    assert g.reachable() == {"start", "loop_back"}


def test_unreachable_steps_give_w401_warnings() -> None:
    result = load_playbook_text(
        HEAD
        + """\
workflow:
  - step: start
    next: a
  - step: a
  - step: orphan
    next: orphan_child
  - step: orphan_child
""",
        "graph.yaml",
    )
    assert result.ok  # warnings do not make a playbook invalid
    assert [(d.code, d.line, d.step, d.message) for d in result.warnings] == [
        ("W401", 9, "orphan", "step 'orphan' is unreachable from the entry step 'start'"),
        (
            "W401",
            11,
            "orphan_child",
            "step 'orphan_child' is unreachable from the entry step 'start'",
        ),
    ]


def test_no_w401_when_every_step_is_reachable() -> None:
    result = load_playbook_text(
        HEAD + "workflow:\n  - step: start\n    next: [a]\n  - step: a\n", "g.yaml"
    )
    assert result.diagnostics == []


def test_no_graph_warnings_when_a_next_had_an_error() -> None:
    """A `next` dropped because of an error must not make its targets look unreachable."""
    result = load_playbook_text(
        HEAD + "workflow:\n  - step: start\n    next: [a, 3]\n  - step: a\n", "g.yaml"
    )
    assert [d.code for d in result.diagnostics] == ["E200"]


def test_exclusive_edge_without_when_before_others_warns() -> None:
    result = load_playbook_text(
        HEAD
        + """\
workflow:
  - step: start
    next:
      mode: exclusive
      to:
        - step: a
        - step: b
          when: "{{ true }}"
  - step: a
  - step: b
""",
        "g.yaml",
    )
    assert result.ok
    assert [(d.code, d.line) for d in result.warnings] == [("W403", 11)]
    assert result.warnings[0].message == (
        "in exclusive mode the edge to 'a' has no 'when', so the edges after it never fire"
    )


def test_components_hold_the_steps_on_cycles_and_nothing_else() -> None:
    g = graph(
        """\
workflow:
  - step: start
    tool: noop
    next: [fetch]
  - step: fetch
    tool: noop
    next: [check]
  - step: check
    tool: noop
    next:
      - {step: fetch, when: "{{ true }}"}
      - {step: done, when: "{{ false }}"}
  - step: done
    tool: noop
    next: [again]
  - step: again
    tool: noop
    next: [{step: again, when: "{{ false }}"}]
"""
    )
    assert set(g.components) == {"fetch", "check", "again"}
    assert g.components["fetch"] == g.components["check"] != g.components["again"]
    assert g.on_cycle("check", "fetch") and g.on_cycle("fetch", "check")
    assert g.on_cycle("again", "again")
    assert not g.on_cycle("start", "fetch") and not g.on_cycle("check", "done")
    assert not g.on_cycle("done", "again")


def test_components_of_a_long_chain_closed_into_one_loop() -> None:
    steps = "".join(f"  - step: s{i}\n    tool: noop\n    next: [s{i + 1}]\n" for i in range(3000))
    closing = '  - step: s3000\n    tool: noop\n    next: [{step: s0, when: "{{ false }}"}]\n'
    g = graph("workflow:\n" + steps + closing)
    assert len(g.components) == 3001 and set(g.components.values()) == {0}


def test_joins_name_the_steps_that_can_reach_a_step_several_steps_call() -> None:
    g = graph(
        """\
workflow:
  - step: start
    tool: noop
    next: [a, b]
  - step: a
    tool: noop
    next: [j]
  - step: b
    tool: noop
    next: [c]
  - step: c
    tool: noop
    next: [j, {step: b, when: "{{ false }}"}]
  - step: j
    tool: noop
"""
    )
    assert g.joins == {"j": frozenset({"start", "a", "b", "c"})}
