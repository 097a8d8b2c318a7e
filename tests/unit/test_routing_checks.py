"""Routing surprises become warnings: an edge that closes a cycle (W410, ignored at run
time) and a step that several steps call without a `when` gate (W411, runs on the first
call), with the line and the fix. Callers that cannot both call in one execution are no
join."""

from __future__ import annotations

import textwrap

from noetl.dsl import load_playbook_text
from noetl.dsl.routing import back_edges, ungated_joins

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: routing
workflow:
"""
FIRST = len(HEAD.splitlines()) + 1  # the line of the first step


def warnings(steps: str) -> list[tuple[int, str, str | None, str, str]]:
    """(line relative to the first step, code, step, key, message) of each W410 / W411."""
    text = HEAD + textwrap.indent(textwrap.dedent(steps).strip("\n"), "  ") + "\n"
    result = load_playbook_text(text, "r.yaml")
    assert result.ok, [d.format() for d in result.errors]
    return [
        (d.line - FIRST if d.line else -1, d.code, d.step, d.key, d.message)
        for d in result.warnings
        if d.code in ("W410", "W411")
    ]


def codes(steps: str) -> list[tuple[str, str | None]]:
    return [(code, step) for _, code, step, _, _ in warnings(steps)]


# --- W410: back-edges ------------------------------------------------------------------------


def test_an_edge_back_to_a_step_that_ran_is_a_warning_with_its_line() -> None:
    assert warnings(
        """
        - step: fetch
          tool: noop
          next: check
        - step: check
          tool: noop
          next:
            - step: fetch
              when: "{{ workload.more }}"
            - step: done
        - step: done
        """
    ) == [
        (
            6,
            "W410",
            "check",
            "workflow[1].next[0].step",
            "next goes back to 'fetch', closing the cycle fetch -> check -> fetch: when this "
            "edge fires, 'fetch' runs again (a new run each time, up to policy.max_runs); make "
            "sure a condition on the cycle ends it",
        )
    ]


def test_a_step_calling_itself_and_a_case_branch_going_back() -> None:
    found = warnings(
        """
        - step: poll
          tool: noop
          case:
            - when: "{{ this.pending }}"
              then: {next: start}
          next: poll
        - step: start
          next: poll
        """
    )
    assert [(line, code, step, key) for line, code, step, key, _ in found] == [
        (4, "W410", "poll", "workflow[0].case[0].then.next"),
        (5, "W410", "poll", "workflow[0].next"),
    ]
    assert found[0][4].startswith("case next goes back to 'start', closing the cycle ")
    assert found[1][4].startswith("next calls 'poll' itself: when this edge fires, 'poll' runs")


def test_the_back_edges_follow_the_written_order_from_the_entry() -> None:
    result = load_playbook_text(
        HEAD + "  - step: start\n    next: [a, b]\n  - step: a\n    next: b\n"
        "  - step: b\n    next: a\n",
        "r.yaml",
    )
    [back] = back_edges(result.require())
    assert (back.arc.source, back.arc.target, back.cycle) == ("b", "a", ("a", "b", "a"))


# --- W411: joins without a gate --------------------------------------------------------------


def test_a_fan_in_without_a_gate_is_a_warning_naming_its_callers() -> None:
    assert warnings(
        """
        - step: start
          next: [a, b]
        - step: a
          next: join
        - step: b
          tool: noop
          next: join
        - step: join
          tool: noop
        """
    ) == [
        (
            7,
            "W411",
            "join",
            "workflow[3].step",
            "called by 'a' and 'b', which can both run, and without a when gate: the step "
            "runs on the first call and the later ones are ignored; to wait for its callers, "
            "add when: \"{{ done('a') and done('b') }}\"",
        )
    ]


def test_a_gated_join_is_fine() -> None:
    assert (
        codes(
            """
            - step: start
              next: [a, b]
            - step: a
              next: join
            - step: b
              next: join
            - step: join
              when: "{{ done('a') and done('b') }}"
            """
        )
        == []
    )


def test_the_branches_of_an_exclusive_next_are_one_caller_or_alternatives() -> None:
    assert (
        codes(
            """
            - step: start
              next:
                mode: exclusive
                to:
                  - {step: same, when: "{{ workload.a }}"}
                  - {step: same, when: "{{ workload.b }}"}
                  - {step: big, when: "{{ workload.n > 10 }}"}
                  - step: small
            - step: big
              next: big_more
            - step: big_more
              next: merge
            - step: small
              next: merge
            - step: same
              next: merge
            - step: merge
            """
        )
        == []
    )


def test_success_and_failure_edges_of_one_step_are_alternatives() -> None:
    assert (
        codes(
            """
            - step: charge
              tool: noop
              next:
                - step: confirm
                - {step: undo, when: "{{ fail('charge') }}"}
            - step: confirm
              next: report
            - step: undo
              next: report
            - step: report
            """
        )
        == []
    )
    # An edge on another step's failure is no alternative of this step's success.
    assert codes(
        """
        - step: start
          next: [charge, other]
        - step: other
        - step: charge
          tool: noop
          next:
            - step: confirm
            - {step: undo, when: "{{ fail('other') }}"}
        - step: confirm
          next: report
        - step: undo
          next: report
        - step: report
        """
    ) == [("W411", "report")]


def test_the_routes_of_case_branches_under_end_step_are_alternatives() -> None:
    body = """
        - step: start
          tool: noop
          {spec}
          case:
            - when: "{{{{ this.a }}}}"
              then: {{next: a}}
            - when: "{{{{ this.b }}}}"
              then: {{next: b}}
          next: c
        - step: a
          next: merge
        - step: b
          next: merge
        - step: c
          next: merge
        - step: merge
        """
    assert codes(body.format(spec="")) == []
    assert codes(body.format(spec="spec: {case_mode: inclusive}")) == []
    assert codes(body.format(spec="spec: {next_policy: defer}")) == [("W411", "merge")]
    found = warnings(body.format(spec="spec: {next_policy: defer, case_mode: inclusive}"))
    assert [(code, step) for _, code, step, _, _ in found] == [("W411", "merge")]
    assert found[0][4].startswith("called by 'a', 'b' and 'c', several of which can run")


def test_the_gate_waits_for_one_of_the_alternatives_and_for_the_others() -> None:
    [(_, code, _, _, message)] = warnings(
        """
        - step: start
          next: [split, c]
        - step: split
          next:
            mode: exclusive
            to:
              - {step: a, when: "{{ workload.a }}"}
              - step: b
        - step: a
          next: join
        - step: b
          next: join
        - step: c
          next: join
        - step: join
        """
    )
    assert code == "W411"
    assert message.endswith("add when: \"{{ (done('a') or done('b')) and done('c') }}\"")


def test_unreachable_callers_and_back_edges_are_no_calls() -> None:
    found = codes(
        """
        - step: start
          next: join
        - step: join
          next: start
        - step: orphan
          next: join
        """
    )
    assert ("W411", "join") not in found
    assert ("W410", "join") in found


def test_conditions_of_inclusive_edges_are_not_read() -> None:
    """Two conditional edges of an inclusive next might both fire: a join."""
    result = load_playbook_text(
        HEAD + "  - step: start\n    next:\n      - {step: a, when: '{{ workload.x }}'}\n"
        "      - {step: b, when: '{{ not workload.x }}'}\n  - step: a\n    next: j\n"
        "  - step: b\n    next: j\n  - step: j\n",
        "r.yaml",
    )
    [join] = ungated_joins(result.require())
    assert (join.step, join.callers) == ("j", ("a", "b"))


def test_a_long_chain_is_checked_without_recursion() -> None:
    steps = "".join(f"  - step: s{i}\n    next: s{i + 1}\n" for i in range(3000))
    steps += "  - step: s3000\n    next: [s0]\n"
    result = load_playbook_text(HEAD + steps, "r.yaml")
    assert [(d.code, d.step) for d in result.warnings] == [("W410", "s3000")]
