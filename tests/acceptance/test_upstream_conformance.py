"""`bench/upstream_e2e.py`, the conformance runner, end to end: a real mock API, a scratch
PostgreSQL database, `noetl run` (or a server and two workers) in subprocesses.

The miniature kit in tests/fixtures/conformance_kit has a case for each way a case ends;
the last test runs two cases of upstream's own kit when it is checked out beside the
project (`../shared/upstream-e2e`), and is skipped otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import FIXTURES, ROOT

MINI_KIT = FIXTURES / "conformance_kit"
UPSTREAM_KIT = ROOT.parent / "shared" / "upstream-e2e"


def conformance(pg_dsn: str, kit: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    runner = [sys.executable, "bench/upstream_e2e.py", "--kit", str(kit), "--json"]
    proc = subprocess.run(
        [*runner, "--pg-dsn", pg_dsn, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def scratch_databases(pg_dsn: str) -> set[str]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'noetl_e2e%'")
        return {row[0] for row in rows}


def files(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {Path(case["path"]).stem: case for case in doc["cases"]}


def test_each_way_a_case_ends_embedded(pg_dsn: str) -> None:
    before, kit_files = scratch_databases(pg_dsn), files(MINI_KIT)
    code, doc, progress = conformance(pg_dsn, MINI_KIT, "--timeout", "10")
    assert code == 1, progress  # not every case passed
    assert doc["mode"] == "embedded"
    # The setup ran first, on the scratch database, with upstream's credential name.
    assert doc["setup"]["got"] == "COMPLETED", doc["setup"]
    cases = by_name(doc)
    assert list(cases) == ["http_ok", "soft_fail", "broken", "slow", "invalid", "pg_read"]

    # The mock API answered at the URL given as api_url; the playbook's verdict is shown.
    assert cases["http_ok"] | {"seconds": 0} == {
        "path": "fixtures/playbooks/http_ok.yaml",
        "group": "no-credentials",
        "core": True,
        "expected": "COMPLETED",
        "got": "COMPLETED",
        "passed": True,
        "seconds": 0,
        "error": None,
        "diagnostics": 0,
        "soft_verdict": "passed (1)",
        "verdicts": [{"where": "context.verdict.test_passed", "passed": True}],
        "note": None,
        "execution_id": cases["http_ok"]["execution_id"],
    }
    assert cases["soft_fail"]["passed"]
    assert cases["soft_fail"]["soft_verdict"] == "FAILED at context.report.checks[1].status"
    assert cases["soft_fail"]["note"] == "completed, but its own checks say it failed"
    # A negative case passes when its execution fails.
    assert (cases["broken"]["got"], cases["broken"]["passed"]) == ("FAILED", True)
    assert cases["broken"]["error"] == "step 'start': RuntimeError: broken on purpose"
    assert cases["slow"]["got"] == "TIMEOUT" and not cases["slow"]["passed"]
    assert cases["slow"]["error"] == "no terminal status within 10 s"
    assert 10 <= cases["slow"]["seconds"] < 20
    assert cases["invalid"]["got"] == "INVALID" and not cases["invalid"]["passed"]
    assert cases["invalid"]["error"] == "E100 line 8 step 'start': unknown tool key 'colour'"
    assert cases["invalid"]["diagnostics"] == 1
    # The local payload replaced the workload's pg_auth (the playbook asserts it), and
    # the credential reached the table the setup made.
    assert cases["pg_read"]["got"] == "COMPLETED", cases["pg_read"]

    assert doc["totals"]["no-credentials"]["passed"] == 3
    assert doc["totals"]["postgres-only"] == {
        "cases": 1,
        "passed": 1,
        "got": {"COMPLETED": 1},
        "soft_failed": 0,
    }
    assert doc["totals"]["all"] | {"got": None} == {
        "cases": 6,
        "passed": 4,
        "got": None,
        "soft_failed": 1,
    }
    assert [item["cause"] for item in doc["causes"]] == [
        "invalid: E100 unknown tool key 'colour'",
        "timeout",
    ]
    # Nothing is left behind: no scratch database, nothing written into the kit.
    assert scratch_databases(pg_dsn) == before
    assert files(MINI_KIT) == kit_files


def test_through_a_server_and_two_workers(pg_dsn: str) -> None:
    before = scratch_databases(pg_dsn)
    only = ("--only", "http_ok", "--only", "slow", "--only", "postgres-only")
    code, doc, progress = conformance(pg_dsn, MINI_KIT, "--distributed", "--timeout", "6", *only)
    assert code == 1, progress
    assert doc["mode"] == "distributed"
    assert doc["setup"]["got"] == "COMPLETED", doc["setup"]
    cases = by_name(doc)
    assert {name: case["got"] for name, case in cases.items()} == {
        "http_ok": "COMPLETED",
        "slow": "TIMEOUT",
        "pg_read": "COMPLETED",
    }
    assert cases["http_ok"]["soft_verdict"] == "passed (1)"
    assert cases["slow"]["error"] == "no terminal status within 6 s"
    assert scratch_databases(pg_dsn) == before


def test_two_cases_of_upstreams_kit(pg_dsn: str) -> None:
    if not (UPSTREAM_KIT / "CASES.tsv").is_file():
        pytest.skip(f"upstream's conformance kit is not checked out at {UPSTREAM_KIT}")
    only = ("--only", "fanout_reduce_phase6", "--only", "should_error_tool_is_required")
    code, doc, progress = conformance(pg_dsn, UPSTREAM_KIT, *only)
    assert [case["path"] for case in doc["cases"]] == [
        "fixtures/playbooks/fanout_reduce/fanout_reduce_phase6.yaml",
        "fixtures/playbooks/broken_playbooks/should_error_tool_is_required.yaml",
    ]
    assert all(case["passed"] for case in doc["cases"]), progress
    assert code == 0
    assert doc["setup"] is None  # no postgres case: nothing to set up
    assert doc["catalog"]["registered"] >= 1
