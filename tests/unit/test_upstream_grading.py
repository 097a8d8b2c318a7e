"""The conformance runner's own rules (bench/upstream_grading.py): reading CASES.tsv,
picking cases, reading a run's answer, grading as upstream does, soft verdicts, causes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from upstream_e2e import CREDENTIAL_NAMES, credentials  # noqa: E402
from upstream_grading import (  # noqa: E402
    Case,
    CaseResult,
    Got,
    Run,
    Verdict,
    cause,
    grade,
    interpret,
    read_cases,
    render_text,
    report,
    select,
    soft_verdicts,
)

HEADER = "path\tgroup\tin_upstream_core_gate\texpected\n"


def case(path: str = "fixtures/playbooks/a.yaml", expected: str = "COMPLETED") -> Case:
    return Case(path, "no-credentials", True, expected)


# --- CASES.tsv and --only ------------------------------------------------------------------


def test_read_cases() -> None:
    text = HEADER + "a.yaml\tno-credentials\tyes\tCOMPLETED\n\nb.yaml\tpostgres-only\tno\tFAILED\n"
    assert read_cases(text) == [
        Case("a.yaml", "no-credentials", True, "COMPLETED"),
        Case("b.yaml", "postgres-only", False, "FAILED"),
    ]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("path\tgroup\n", 1),
        (HEADER + "a.yaml\tno-credentials\tyes\tCOMPLETED\na.yaml\tg\tyes\tDONE\n", 3),
        (HEADER + "a.yaml no-credentials yes COMPLETED\n", 2),
    ],
)
def test_a_malformed_cases_file_names_the_line(text: str, line: int) -> None:
    with pytest.raises(ValueError, match=rf"^kit/CASES.tsv:{line}: "):
        read_cases(text, "kit/CASES.tsv")


def test_only_picks_groups_globs_and_parts_of_paths() -> None:
    cases = [
        Case(
            "fixtures/playbooks/hello_world/hello_world.yaml", "no-credentials", True, "COMPLETED"
        ),
        Case("fixtures/playbooks/pagination/basic/t.yaml", "no-credentials", True, "COMPLETED"),
        Case("fixtures/playbooks/postgres_test.yaml", "postgres-only", True, "COMPLETED"),
    ]
    assert select(cases, None) == cases
    assert select(cases, ["postgres-only"]) == cases[2:]
    assert select(cases, ["*/pagination/*"]) == cases[1:2]
    assert select(cases, ["hello_world"]) == cases[:1]
    # Several values: any of them, in the file's order.
    assert select(cases, ["postgres_test", "hello"]) == [cases[0], cases[2]]
    assert select(cases, ["nothing-like-it"]) == []


# --- a run's answer ------------------------------------------------------------------------


def test_a_completed_run() -> None:
    run = interpret({"execution_id": "7", "status": "ok", "steps": {}, "context": {}}, 1.5)
    assert (run.got, run.error, run.execution_id, run.seconds) == (Got.COMPLETED, None, "7", 1.5)


def test_a_failed_run_gives_the_first_failed_steps_first_line() -> None:
    doc = {
        "status": "fail",
        "steps": {
            "start": {"status": "ok"},
            "load": {"status": "failed", "error": "ValueError: bad row\n  inline code, line 2"},
            "later": {"status": "failed", "error": "other"},
        },
        "error": "step 'load' failed",
    }
    run = interpret(doc, 1.0)
    assert run.got is Got.FAILED
    assert run.error == "step 'load': ValueError: bad row"


def test_a_failed_run_without_a_step_error_gives_the_executions() -> None:
    assert interpret({"status": "canceled", "error": "canceled by api"}, 1).error == (
        "canceled by api"
    )
    assert interpret({"status": "fail"}, 1).error == "execution fail"


def test_an_invalid_playbook_gives_its_first_error_diagnostic() -> None:
    doc = {
        "status": "invalid",
        "diagnostics": [
            {"severity": "warning", "code": "W001", "message": "legacy", "line": 2},
            {"severity": "error", "code": "E100", "message": "unknown tool key 'input'",
             "line": 19, "step": "start"},
            {"severity": "error", "code": "E200", "message": "other", "line": 30},
        ],
    }  # fmt: skip
    run = interpret(doc, 0.5)
    assert run.got is Got.INVALID
    assert run.error == "E100 line 19 step 'start': unknown tool key 'input'"
    assert run.diagnostics == 2


def test_no_answer_is_an_error_with_the_last_line_on_stderr() -> None:
    run = interpret(None, 0.3, stderr="Traceback (most recent call last):\n  ...\nOSError: x\n\n")
    assert (run.got, run.error) == (Got.ERROR, "OSError: x")
    assert interpret({"status": "error", "error": "no such file"}, 0.1).error == "no such file"


def test_a_timeout_keeps_what_was_seen() -> None:
    seen = {"execution_id": "9", "status": "running", "context": {"a": {"test_passed": True}}}
    run = interpret(seen, 60.2, timed_out=True, timeout_s=60)
    assert (run.got, run.error, run.execution_id) == (
        Got.TIMEOUT,
        "no terminal status within 60 s",
        "9",
    )
    assert run.verdicts == (Verdict("context.a.test_passed", True),)


def test_a_long_error_is_cut_to_one_short_line() -> None:
    run = interpret({"status": "fail", "error": "x" * 500 + "\nmore"}, 1)
    assert run.error is not None
    assert len(run.error) == 160 and run.error.endswith("…")


# --- grading -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "got", "passed", "noted"),
    [
        ("COMPLETED", Got.COMPLETED, True, False),
        ("COMPLETED", Got.FAILED, False, False),
        ("COMPLETED", Got.INVALID, False, False),
        ("COMPLETED", Got.TIMEOUT, False, False),
        ("COMPLETED", Got.ERROR, False, False),
        ("FAILED", Got.FAILED, True, False),
        ("FAILED", Got.INVALID, True, True),
        ("FAILED", Got.COMPLETED, False, False),
        ("FAILED", Got.TIMEOUT, False, False),
        ("FAILED", Got.ERROR, False, False),
    ],
)
def test_grading_is_upstreams(expected: str, got: Got, passed: bool, noted: bool) -> None:
    graded = grade(expected, got)
    assert graded.passed is passed
    assert (graded.note is not None) is noted


# --- soft verdicts -------------------------------------------------------------------------


def test_soft_verdicts_are_found_in_the_context_and_step_results() -> None:
    doc: dict[str, Any] = {
        "status": "ok",
        "steps": {
            # The engine's own step status is not the playbook's verdict.
            "check": {"status": "failed", "result": {"status": "passed"}},
            "other": {"status": "ok"},
        },
        "context": {
            "verify": {"test_passed": True, "checks_passed": 4},
            "report": {"items": [{"status": "PASS"}, {"test": "failed"}, {"status": "done"}]},
            "summary": {"all_checks_passed": False, "passed": "yes"},
        },
    }
    assert soft_verdicts(doc) == [
        Verdict("context.verify.test_passed", True),
        Verdict("context.report.items[0].status", True),
        Verdict("context.report.items[1].test", False),
        Verdict("context.summary.all_checks_passed", False),
        Verdict("steps.check.result.status", True),
    ]
    assert soft_verdicts(None) == []
    assert soft_verdicts({"status": "ok", "context": {"a": 1}}) == []


def test_a_completed_case_whose_own_checks_failed_is_noted_not_failed() -> None:
    doc = {"status": "ok", "context": {"end": {"test_passed": False}, "x": {"all_passed": True}}}
    result = CaseResult(case(), interpret(doc, 1))
    assert result.graded.passed
    assert result.soft == "FAILED at context.end.test_passed"
    assert result.note == "completed, but its own checks say it failed"
    passed = CaseResult(case(), interpret({"status": "ok", "context": {"x": {"passed": True}}}, 1))
    assert (passed.soft, passed.note) == ("passed (1)", None)


# --- causes and the report -----------------------------------------------------------------


def test_causes_group_what_differs_only_by_step_line_or_number() -> None:
    def failed(run: Run) -> CaseResult:
        return CaseResult(case(), run)

    a = failed(Run(Got.INVALID, 1, "E100 line 19 step 'start': unknown tool key 'input'"))
    b = failed(Run(Got.INVALID, 1, "E100 line 7 step 'end': unknown tool key 'input'"))
    c = failed(Run(Got.FAILED, 1, "step 'load': HTTP 503 after 3 attempts"))
    d = failed(Run(Got.FAILED, 1, "step 'fetch': HTTP 503 after 5 attempts"))
    assert cause(a) == cause(b) == "invalid: E100 unknown tool key 'input'"
    assert cause(c) == cause(d) == "failed: HTTP N after N attempts"
    assert cause(failed(Run(Got.TIMEOUT, 60, "no terminal status within 60 s"))) == "timeout"
    negative = CaseResult(case(expected="FAILED"), Run(Got.COMPLETED, 1))
    assert cause(negative) == "completed (expected FAILED)"


def test_the_report_totals_each_group_and_ranks_the_causes() -> None:
    pg = Case("fixtures/playbooks/p.yaml", "postgres-only", False, "COMPLETED")
    results = [
        CaseResult(case("fixtures/playbooks/a.yaml"), Run(Got.COMPLETED, 1.0)),
        CaseResult(
            case("fixtures/playbooks/b.yaml"),
            Run(Got.INVALID, 0.5, "E100 line 3: x", diagnostics=4),
        ),
        CaseResult(case("fixtures/playbooks/c.yaml", "FAILED"), Run(Got.INVALID, 0.5, "E1: y")),
        CaseResult(pg, Run(Got.INVALID, 0.6, "E100 line 9 step 's': x")),
        CaseResult(pg, Run(Got.TIMEOUT, 60.0, "no terminal status within 60 s")),
    ]
    doc = report(results, mode="embedded")
    assert json.loads(json.dumps(doc)) == doc  # one JSON document
    assert doc["mode"] == "embedded"
    assert doc["totals"]["no-credentials"] == {
        "cases": 3,
        "passed": 2,
        "got": {"COMPLETED": 1, "INVALID": 2},
        "soft_failed": 0,
    }
    assert doc["totals"]["postgres-only"]["passed"] == 0
    assert doc["totals"]["all"]["cases"] == 5 and doc["totals"]["all"]["passed"] == 2
    assert doc["causes"] == [
        {
            "cause": "invalid: E100 x",
            "count": 2,
            "cases": ["fixtures/playbooks/b.yaml", "fixtures/playbooks/p.yaml"],
        },
        {"cause": "timeout", "count": 1, "cases": ["fixtures/playbooks/p.yaml"]},
    ]
    c = doc["cases"][2]
    assert (c["got"], c["passed"], c["note"]) == (
        "INVALID",
        True,
        grade("FAILED", Got.INVALID).note,
    )

    text = render_text(doc)
    assert "FAIL  no-credentials  COMPLETED  INVALID       0.5  b.yaml" in text
    assert "      error: E100 line 3: x (+3 more)\n" in text
    assert "postgres-only   0/2 passed  (INVALID 1, TIMEOUT 1)" in text
    assert "   2  invalid: E100 x" in text


# --- credentials ---------------------------------------------------------------------------


def test_every_credential_name_points_at_the_scratch_database(tmp_path: Path) -> None:
    env = credentials("postgresql://etl:s%40cret@db.local:6543/noetl_e2e_1", tmp_path)
    records = json.loads(Path(env["NOETL_CREDENTIALS_FILE"]).read_text(encoding="utf-8"))
    assert set(records) == set(CREDENTIAL_NAMES) >= {
        "pg_local", "pg_k8s", "pg_auth", "test_postgres", "noetl_connection"
    }  # fmt: skip
    assert records["pg_k8s"] == {
        "type": "postgres",
        "data": {
            "db_host": "db.local",
            "db_port": "6543",
            "db_user": "etl",
            "db_password": "s@cret",
            "db_name": "noetl_e2e_1",
        },
    }
    assert json.loads(env["NOETL_CREDENTIAL_TEST_POSTGRES"]) == {
        "dsn": "postgresql://etl:s%40cret@db.local:6543/noetl_e2e_1"
    }
