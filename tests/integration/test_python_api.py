"""The Python API (`noetl.run`, `noetl.validate`): a playbook as a file, as text and as a
dict; failures, invalid playbooks, a timeout; twice in one process; and a script without
a `__main__` guard, run as a real program."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

import noetl
from noetl.core import ExecutionStatus, StepStatus
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
    only = result.steps["only"]
    assert only.status is StepStatus.OK and only.result == 42 and only.error is None
    assert result.db is None and result.duration_s >= 0
    assert from_file.steps["total"].attempts == 1 and from_file.steps["total"].line == 6
    assert from_file.to_dict()["steps"] == {"total": {"status": "ok"}}
    with pytest.raises(FrozenInstanceError):
        result.status = ExecutionStatus.FAIL  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.steps["other"] = only  # type: ignore[index]


def test_a_failing_step_and_a_kept_database(tmp_path: Path) -> None:
    text = TEXT.replace('sum(range(args["n"] + 1))', "1 / 0")
    db = tmp_path / "kept.db"
    result = noetl.run(text, db=db)
    assert not result.ok and result.status is ExecutionStatus.FAIL
    [failed] = result.failed_steps
    assert failed.name == "total" and failed.status is StepStatus.FAILED
    assert failed.error is not None and "ZeroDivisionError" in failed.error
    assert result.error is not None
    assert db.exists() and result.db == str(db)  # kept for `noetl exec` / `noetl dlq`


def test_retries_are_counted_and_settings_apply() -> None:
    flaky = TEXT.replace('return sum(range(args["n"] + 1))', "1 / 0").replace(
        "result: {as: total}",
        "result: {as: total}\n    retry: {max_attempts: 3, initial_delay: 0.01}",
    )
    assert noetl.validate(flaky).ok, noetl.validate(flaky).diagnostics
    result = noetl.run(flaky, workers=1)
    step = result.steps["total"]
    assert step.status is StepStatus.FAILED and step.attempts == 3 and step.retries == 2
    legacy = TEXT.replace("result: {as: total}", "save: {as: total}")
    assert not noetl.validate(legacy, settings={"dsl.allow_legacy": False}).ok
    with pytest.raises(noetl.ConfigError, match=r"no setting 'run\.wrkers'"):
        noetl.run(TEXT, settings={"run.wrkers": 2})


def test_runs_from_two_threads_at_once() -> None:
    box: dict[int, noetl.RunReport] = {}
    threads = [
        threading.Thread(target=lambda n=n: box.update({n: noetl.run(TEXT, {"n": n})}))
        for n in (2, 3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert {n: r.context["total"] for n, r in box.items()} == {2: 3, 3: 6}


def test_an_invalid_playbook_raises_with_its_diagnostics() -> None:
    bad = TEXT.replace("kind: python", "kind: pythn")
    report = noetl.validate(bad)
    assert not report.ok
    [error] = report.errors
    assert error.code == "E304" and error.line == 8 and error.step == "total"
    assert error.severity.value == "error" and "pythn" in error.message
    with pytest.raises(noetl.PlaybookError) as raised:
        noetl.run(bad)
    assert raised.value.diagnostics[0].code == "E304"
    assert noetl.validate(TEXT).ok
    with pytest.raises(FileNotFoundError):
        noetl.run("no/such/flow.yaml")


def test_a_workload_the_engine_cannot_take_is_refused_naming_where() -> None:
    looped: dict[str, object] = {}
    looped["again"] = looped
    with pytest.raises(ValueError, match=r"^workload\.again\.again.*levels"):
        noetl.run(TEXT, workload={"again": looped})
    with pytest.raises(ValueError, match=r"^workload\.rows\[1\]: .*NUL"):
        noetl.run(TEXT, workload={"rows": ["ok", "a\x00b"]})
    with pytest.raises(ValueError, match=r"^workload\.n: "):
        noetl.run(TEXT, workload={"n": float("nan")})


def test_a_timeout_cancels_the_execution() -> None:
    slow = TEXT.replace('return sum(range(args["n"] + 1))', "import time; time.sleep(30)")
    with pytest.raises(TimeoutError, match=r"did not end within 1\.0 s"):
        noetl.run(slow, timeout=1.0)


def test_a_script_without_a_main_guard_runs_and_exits(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import threading
            import noetl
            print("start")  # printed once: the pool never imports this script again
            result = noetl.run({TEXT!r}, {{"n": 5}})
            again = noetl.run({TEXT!r}, {{"n": 6}})
            box = []
            thread = threading.Thread(target=lambda: box.append(noetl.run({TEXT!r})))
            thread.start()
            thread.join()
            print(result.status.value, result.context["total"], again.context["total"],
                  box[0].context["total"])
            """
        ),
        encoding="utf-8",
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: what it leaves behind is findable
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert proc.returncode == 0, err[-3000:]
    assert out.split("\n")[:2] == ["start", "ok 15 21 6"]
    assert list(tmp_path.iterdir()) == [script]  # nothing written where it ran
    deadline = time.monotonic() + 10
    while _group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)  # the fork server and resource tracker exit after their parent
    assert _group(proc.pid) == [], "processes left running"


def _group(pgid: int) -> list[str]:
    """The processes of process group `pgid` still running (Linux /proc)."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            left.append(entry.name)
    return left


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
