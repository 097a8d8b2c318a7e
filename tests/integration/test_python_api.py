"""The Python API (`noetl.run`, `noetl.validate`): a playbook as a file, as text and as a
dict; failures, invalid playbooks, a timeout; twice in one process; and a script without
a `__main__` guard, run as a real program."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import noetl
from noetl.core import ExecutionStatus
from tests.conftest import ROOT

TEXT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: api_sum}
workload: {n: 3}
workflow:
  - step: total
    tool:
      kind: python
      code: |
        def main(context, args):
            return sum(range(args["n"] + 1))
      args: {n: "{{ workload.n }}"}
    result: {as: total}
"""


def test_run_a_file_text_and_dict(tmp_path: Path) -> None:
    path = tmp_path / "sum.yaml"
    path.write_text(TEXT, encoding="utf-8")
    from_file = noetl.run(path, {"n": 4})
    assert from_file.ok and from_file.status is ExecutionStatus.OK
    assert from_file.context == {"total": 10}
    assert noetl.run(str(path)).context == {"total": 6}
    assert noetl.run(TEXT, {"n": 10}).context == {"total": 55}
    as_dict = {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": "d"},
        "workflow": [{"step": "only", "result": {"pick": "{{ 6 * 7 }}", "as": "answer"}}],
    }
    result = noetl.run(as_dict)
    assert result.ok and result.context == {"answer": 42}
    assert result.steps["only"]["status"] == "ok"


def test_a_failing_step_and_a_kept_database(tmp_path: Path) -> None:
    text = TEXT.replace('sum(range(args["n"] + 1))', "1 / 0")
    db = tmp_path / "kept.db"
    result = noetl.run(text, db=db)
    assert not result.ok and result.status is ExecutionStatus.FAIL
    assert "ZeroDivisionError" in result.steps["total"]["error"]
    assert db.exists()  # kept for `noetl exec` / `noetl dlq`


def test_an_invalid_playbook_raises_with_its_diagnostics() -> None:
    bad = TEXT.replace("kind: python", "kind: pythn")
    report = noetl.validate(bad)
    assert not report.ok
    [error] = report.errors
    assert error.code == "E304" and error.line == 8
    with pytest.raises(noetl.PlaybookError) as raised:
        noetl.run(bad)
    assert raised.value.diagnostics[0].code == "E304"
    assert noetl.validate(TEXT).ok
    with pytest.raises(FileNotFoundError):
        noetl.run("no/such/flow.yaml")


def test_a_timeout_cancels_the_execution() -> None:
    slow = TEXT.replace('return sum(range(args["n"] + 1))', "import time; time.sleep(30)")
    with pytest.raises(TimeoutError, match=r"did not end within 1\.0 s"):
        noetl.run(slow, timeout=1.0)


def test_a_script_without_a_main_guard_runs_and_exits(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import noetl
            print("start")  # printed once: the pool never imports this script again
            result = noetl.run({TEXT!r}, {{"n": 5}})
            again = noetl.run({TEXT!r}, {{"n": 6}})
            print(result.status.value, result.context["total"], again.context["total"])
            """
        ),
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:2] == ["start", "ok 15 21"]


def test_import_noetl_loads_no_engine() -> None:
    code = "import sys, noetl; print(sorted(m for m in sys.modules if m.startswith('noetl')))"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == "['noetl']"
