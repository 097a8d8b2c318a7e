"""The validator's checks of retry `scope` and `on`: a chain scope without a chain, a list
that is never read, an unknown trigger; and the engine's trigger matching."""

from __future__ import annotations

import textwrap

import pytest

from noetl.dsl import load_playbook_text
from noetl.dsl.model import RetryPolicy
from noetl.engine.retry import DEFAULT_STATUS_CODES, RetryAction, RetryRule, assess, matched_trigger

HEAD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: retry_checks
workflow:
"""
FIRST = len(HEAD.splitlines()) + 1


def found(steps: str) -> list[tuple[int | None, str, str | None, str | None]]:
    text = HEAD + textwrap.indent(textwrap.dedent(steps).strip("\n"), "  ") + "\n"
    diags = load_playbook_text(text, "r.yaml").diagnostics
    return [(None if d.line is None else d.line - FIRST, d.code, d.step, d.key) for d in diags]


PYTHON = 'tool: {kind: python, code: "def main(context, args):\\n    return 1\\n"}'


def test_chain_scope_needs_a_chain() -> None:
    problems = found(f"""
        - step: start
          {PYTHON}
          retry: {{max_attempts: 2, scope: chain}}
    """)
    assert [(line, code, step) for line, code, step, _ in problems] == [(2, "E342", "start")]


def test_chain_scope_on_a_pipeline_is_valid() -> None:
    assert (
        found("""
        - step: start
          tool:
            kind: pipeline
            spec:
              tasks:
                - name: a
                  tool: {kind: noop}
          retry: {max_attempts: 2, scope: chain, on: [error, status_code], status_codes: [503]}
    """)
        == []
    )


def test_lists_that_are_never_read_are_warnings() -> None:
    problems = found(f"""
        - step: start
          {PYTHON}
          retry:
            max_attempts: 2
            status_codes: [503]
            exceptions: [KeyError]
    """)
    assert [(line, code) for line, code, _, _ in problems] == [(4, "W420"), (5, "W421")]


def test_an_unknown_trigger_is_an_error_with_its_line() -> None:
    problems = found(f"""
        - step: start
          {PYTHON}
          retry: {{on: [timeout]}}
    """)
    assert problems == [(2, "E102", "start", "workflow[0].retry.on[0]")]
    text = HEAD + f"  - step: start\n    {PYTHON}\n    retry: {{on: [timeout]}}\n"
    (diag,) = load_playbook_text(text, "r.yaml").diagnostics
    assert "'error', 'status_code' or 'exception'" in diag.message and "timeout" in diag.message


def rule(**block: object) -> RetryRule:
    return RetryRule.of_block(RetryPolicy.model_validate(block), "step")


@pytest.mark.parametrize(
    ("block", "outcome", "expected"),
    [
        ({"on": ["error"]}, {"ok": False, "error": "x", "error_type": "ValueError"}, "error"),
        ({"on": ["status_code"]}, {"ok": True, "this": {"status_code": 503}}, "status_code"),
        ({"on": ["status_code"]}, {"ok": True, "this": {"status_code": 404}}, None),
        (
            {"on": "status_code", "status_codes": 404},
            {"ok": False, "this": {"status_code": 404}, "error_type": "HttpError"},
            "status_code",
        ),
        (
            {"on": ["exception"], "exceptions": ["KeyError"]},
            {"ok": False, "error_type": "KeyError"},
            "exception",
        ),
        (
            {"on": ["exception"], "exceptions": ["Timeout"]},
            {"ok": False, "error_type": "requests.Timeout"},
            "exception",
        ),
        (
            {"on": ["exception"], "exceptions": ["KeyError"]},
            {"ok": False, "error_type": "ValueError"},
            None,
        ),
        ({"on": ["exception", "error"], "exceptions": ["KeyError"]}, {"ok": True, "this": 1}, None),
    ],
)
def test_matched_trigger(
    block: dict[str, object], outcome: dict[str, object], expected: str | None
) -> None:
    assert matched_trigger(rule(**block), outcome) == expected


def test_a_matched_trigger_runs_out_of_attempts() -> None:
    r = rule(on=["status_code"], max_attempts=2, jitter=False, initial_delay=0.5)
    answer = {"ok": True, "this": {"status_code": 503}}
    first = assess(r, answer, 1, lambda c, n: True, step="s", key="k")
    assert (first.action, first.trigger, first.delay_s) == (RetryAction.RETRY, "status_code", 0.5)
    last = assess(r, answer, 2, lambda c, n: True, step="s", key="k")
    assert last.action is RetryAction.EXHAUSTED and last.error is not None
    assert 503 in DEFAULT_STATUS_CODES and 404 not in DEFAULT_STATUS_CODES


def test_retry_when_and_stop_when_still_apply_with_triggers() -> None:
    answer = {"ok": False, "error": "x", "error_type": "KeyError"}
    r = rule(on=["exception"], exceptions=["KeyError"], retry_when="{{ attempt < 2 }}")
    assert assess(r, answer, 1, lambda c, n: False, step="s", key="k").action is RetryAction.FINISH
    r = rule(on=["exception"], exceptions=["KeyError"], stop_when="{{ true }}")
    assert assess(r, answer, 1, lambda c, n: True, step="s", key="k").action is RetryAction.FINISH
