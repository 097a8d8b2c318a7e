"""The validator's `case` checks: what would only fail (or silently do nothing) at run time
is reported before, with file, line, step, key and a stable code."""

from __future__ import annotations

import textwrap

from noetl.dsl import Diagnostic, load_playbook_text

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: case_checks
workflow:
"""
FIRST = len(HEAD.splitlines()) + 1  # the line of the first step


def diagnostics(steps: str) -> list[Diagnostic]:
    text = HEAD + textwrap.indent(textwrap.dedent(steps).strip("\n"), "  ") + "\n"
    return load_playbook_text(text, "c.yaml").diagnostics


def found(steps: str) -> list[tuple[int | None, str, str | None, str]]:
    """(line relative to the first step, code, step, key) of every diagnostic."""
    return [
        (None if d.line is None else d.line - FIRST, d.code, d.step, d.key)
        for d in diagnostics(steps)
    ]


def test_a_valid_case_has_no_diagnostics() -> None:
    assert (
        found(
            """
            - step: call
              tool: noop
              spec: {eval_mode: on_event, case_mode: inclusive, next_policy: defer}
              case:
                - when: "{{ this.status_code == 503 }}"
                  then: {retry: {max_attempts: 3}, set: {tries: "{{ attempt }}"}}
                - when: "{{ success }}"
                  then: {result: {as: body}, sink: [{file: {path: out.json}}], next: done_step}
            - step: done_step
            """
        )
        == []
    )


def test_e320_on_event_on_a_step_that_runs_nothing() -> None:
    assert found(
        """
        - step: route
          spec: {eval_mode: on_event}
          case:
            - when: true
              then: {set: {x: 1}}
        """
    ) == [(1, "E320", "route", "workflow[0].spec.eval_mode")]


def test_e321_a_retry_with_no_tool_attempt_to_run_again() -> None:
    no_tool = found(
        """
        - step: a
          spec: {eval_mode: on_event}
          loop: {collection: [1]}
          case:
            - when: true
              then: {retry: true}
        """
    )
    assert (5, "E321", "a", "workflow[0].case[0].then.retry") in no_tool
    loop = diagnostics(
        """
        - step: a
          loop: {collection: [1]}
          tool: noop
          spec: {eval_mode: on_event}
          case:
            - when: true
              then: {retry: true}
        """
    )
    [message] = [d.message for d in loop if d.code == "E321"]
    assert message.startswith("a case retry cannot run a loop again")
    on_entry = diagnostics(
        """
        - step: a
          tool: noop
          spec: {eval_mode: on_entry}
          case:
            - when: true
              then: {retry: 2}
        """
    )
    assert [(d.code, d.message) for d in on_entry] == [
        (
            "E321",
            "a case retry runs the step's tool again, which has not run yet on entry; drop "
            "spec.eval_mode: on_entry",
        )
    ]
    # A step with a tool evaluates its case after the tool unless told otherwise.
    assert (
        found(
            """
            - step: a
              tool: noop
              case:
                - when: true
                  then: {retry: 2}
            """
        )
        == []
    )


def test_e322_result_or_sink_without_a_tool_on_entry() -> None:
    assert found(
        """
        - step: a
          tool: noop
          spec: {eval_mode: on_entry}
          case:
            - when: true
              then: {result: {as: saved}}
        """
    ) == [(5, "E322", "a", "workflow[0].case[0].then.result")]
    [no_tool] = diagnostics(
        """
        - step: a
          case:
            - when: true
              then: {sink: [{file: {path: x.json}}]}
        """
    )
    assert (no_tool.code, no_tool.message) == (
        "E322",
        "a branch sink without a tool has no output to use on entry (the step runs no tool); "
        "give the branch a tool",
    )
    # By default a step with a tool evaluates its case on the tool's output.
    assert (
        found(
            """
            - step: a
              tool: noop
              case:
                - when: true
                  then: {result: {as: saved}}
            """
        )
        == []
    )
    # With a tool of its own, the branch has an output.
    assert (
        found(
            """
            - step: a
              case:
                - when: true
                  then: {tool: noop, result: {as: saved}, sink: [{file: {path: x.json}}]}
            """
        )
        == []
    )


def test_e323_actions_that_contradict_each_other() -> None:
    assert found(
        """
        - step: a
          tool: noop
          spec: {eval_mode: on_event, case_mode: inclusive}
          case:
            - when: true
              then: {skip: true, retry: true}
            - when: true
              then: {retry: true, next: b}
        - step: b
        """
    ) == [
        (5, "E323", "a", "workflow[0].case[0].then.retry"),
        (7, "E323", "a", "workflow[0].case[1].then.next"),
    ]
    # `fail: false` and `skip: false` are no action.
    assert (
        found(
            """
            - step: a
              case:
                - when: true
                  then: {fail: false, skip: true}
            """
        )
        == []
    )


def test_e324_conditions_inside_a_case_retry() -> None:
    assert found(
        """
        - step: a
          tool: noop
          spec: {eval_mode: on_event}
          case:
            - when: true
              then:
                retry: {stop_when: "{{ attempt > 2 }}"}
        """
    ) == [(6, "E324", "a", "workflow[0].case[0].then.retry.stop_when")]


def test_set_names_must_be_identifiers_that_hide_no_built_in() -> None:
    assert found(
        """
        - step: a
          case:
            - when: true
              then:
                set:
                  workload: 1
                  bad-name: 2
                  fine: 3
        """
    ) == [
        (5, "E308", "a", "workflow[0].case[0].then.set.workload"),
        (6, "E103", "a", "workflow[0].case[0].then.set.bad-name"),
    ]


def test_e307_the_sinks_of_a_branch_share_their_ids() -> None:
    assert found(
        """
        - step: a
          case:
            - when: true
              then:
                tool: noop
                result: {sink: [{file: {path: x.json, id: copy}}]}
                sink: [{file: {path: y.json, id: copy}}]
        """
    ) == [(6, "E307", "a", "workflow[0].case[0].then.sink[0]")]


def test_warning_codes_and_places() -> None:
    diags = diagnostics(
        """
        - step: a
          spec: {case_mode: exclusive}
          next: b
        - step: b
          case:
            - when: true
              priority: 1
              then: {set: {x: 1}}
            - when: "{{ workload.y }}"
              then: {set: {y: 1}}
          next: c
        - step: c
          spec: {branch_order: priority, next_policy: break_chain}
          case:
            - when: true
              then: {next: a}
        """
    )
    assert all(d.severity.value == "warning" for d in diags)
    assert [(d.code, d.step, d.key) for d in diags] == [
        ("W406", "a", "workflow[0].spec"),
        ("W408", "b", "workflow[1].case[0].priority"),
        ("W407", "b", "workflow[1].case[1].when"),
        ("W408", "c", "workflow[2].spec.branch_order"),
        ("W409", "c", "workflow[2].case[0].then.next"),
    ]
    assert [d.line for d in diags] == [FIRST + 1, FIRST + 6, FIRST + 8, FIRST + 12, FIRST + 15]


# --- E325: an on-entry condition that reads the tool's outcome ----------------------------------


def test_e325_an_on_entry_condition_reading_the_outcome_is_an_error_with_its_line() -> None:
    diags = diagnostics(
        """
        - step: a
          tool: noop
          spec: {eval_mode: on_entry}
          case:
            - when: "{{ workload.x }}"
              then: {set: {x: 1}}
            - when: >-
                {{ workload.y
                   and result.n > 3 }}
              then: {set: {y: 1}}
        """
    )
    assert [(d.line and d.line - FIRST, d.code, d.step, d.key) for d in diags] == [
        (8, "E325", "a", "workflow[0].case[1].when")
    ]
    assert diags[0].message == (
        "when reads 'result', the tool's outcome, but spec.eval_mode: on_entry evaluates the "
        "case before the tool runs, so it never matches; drop eval_mode: on_entry to evaluate "
        "it on the tool's outcome"
    )


def test_e325_every_outcome_name_counts_on_a_step_without_a_tool() -> None:
    for name in ("result", "this", "status_code", "error", "data", "success"):
        [diag] = diagnostics(
            f"""
            - step: a
              case:
                - when: "{{{{ {name} }}}}"
                  then: {{set: {{x: 1}}}}
            """
        )
        assert (diag.code, diag.line and diag.line - FIRST, diag.key) == (
            "E325",
            2,
            "workflow[0].case[0].when",
        )
        assert diag.message == (
            f"when reads '{name}', the tool's outcome, but the step runs no tool, so its case "
            "is evaluated on entry and never matches; give the step a tool, or read what an "
            "earlier step saved (result.as)"
        )


def test_e325_names_the_playbook_saves_are_not_outcomes() -> None:
    assert (
        found(
            """
            - step: first
              tool: noop
              result: {as: data}
              next: a
            - step: a
              bind: {success: true}
              case:
                - when: "{{ data.n > 1 and success }}"
                  then: {set: {status_code: 200}}
                - when: "{{ status_code == 200 }}"
                  then: {set: {done: true}}
                - when: "{% set result = 1 %}{{ result }}"
                  then: {set: {other: true}}
            """
        )
        == []
    )


def test_e325_not_when_the_case_sees_the_outcome() -> None:
    assert (
        found(
            """
            - step: a
              tool: noop
              case:
                - when: "{{ result.n > 3 and this and status_code == 200 }}"
                  then: {set: {big: true}}
            """
        )
        == []
    )
