"""One execution that cannot be decided or written fails on its own, recorded once, while
the others of the same batch go on: the server's orchestrator (real SQLite and a real
PostgreSQL) and the embedded runtime of `noetl run` (a real SQLite file).
tests/distributed/test_bad_input.py does the same with real server and worker processes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from noetl.core import EventType, ExecutionStatus, Outcome, Task
from noetl.dsl.validate import load_playbook_text
from noetl.runtime.local import embedded_runtime
from noetl.runtime.orchestrator import Orchestrator
from noetl.store.base import InputKind, Store

LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: loop}
workflow:
  - step: start
    loop: {collection: "{{ range(100) | list }}", mode: parallel, max_concurrency: 100}
    tool: {kind: noop, args: {n: "{{ item }}"}}
"""
WAITS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: waits}
workflow:
  - step: start
    tool: {kind: noop}
"""


def work(store: Store) -> int:
    """A worker's part: complete every queued task with its args."""
    leases = store.claim("w", limit=500, lease_s=30)
    for lease in leases:
        outcome = {"task_id": lease.task.task_id, "ok": True, "this": lease.task.args}
        assert store.complete(lease.task.task_id, lease.token, outcome)
    return len(leases)


def failures(caplog: pytest.LogCaptureFixture, execution_id: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno >= logging.ERROR and f"execution {execution_id} failed" in r.getMessage()
    ]


def test_an_input_the_engine_raises_on_fails_its_execution_alone_and_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    orchestrator = Orchestrator(store, owner="test", input_lease_s=0.0)
    bad = orchestrator.start_execution(WAITS)
    loop = orchestrator.start_execution(LOOP)
    work(store)  # the loop's 100 outcomes and the other's one wait in the inbox
    # A replay whose task cannot be read (a client or an older version wrote it): the
    # engine raises on it. It is decided in the same batch as the loop's outcomes.
    store.post_input(bad, InputKind.REPLAY, {"task": {"step": "start"}, "by": "test"})
    with caplog.at_level(logging.ERROR, logger="noetl.orchestrator"):
        handled = orchestrator.run_once()
        assert handled == 102
        for _ in range(3):  # nothing is retried: no input is left, nothing else is logged
            assert orchestrator.run_once() == 0
    assert store.get_execution(loop).status is ExecutionStatus.OK  # type: ignore[union-attr]
    record = store.get_execution(bad)
    assert record is not None and record.status is ExecutionStatus.FAIL
    events = store.load_events(bad)
    finished = [e for e in events if e.type == EventType.WORKFLOW_FINISHED]
    assert len(finished) == 1
    assert finished[0].payload["internal"] is True
    assert finished[0].payload["error"].startswith("internal error: KeyError")
    # Its task in flight was canceled with it.
    assert [e.payload["task_ids"] for e in events if e.type == EventType.TASK_CANCELED] == [
        [f"{bad}.start"]
    ]
    logged = failures(caplog, bad)
    assert len(logged) == 1 and logged[0].exc_info is not None


class SetTool:
    """A tool (standing in for the http tool) that returns a value JSON cannot hold."""

    kind = "http"
    uses_credentials = False

    def run(self, task: Task) -> Outcome:
        return Outcome(task.task_id, ok=True, this={"tags": {"a", "b"}})


ODD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: odd}
workflow:
  - step: start
    tool: {kind: http, spec: {url: "http://127.0.0.1:9/never-called"}}
"""


def test_the_embedded_runtime_fails_only_the_execution_it_cannot_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with embedded_runtime(str(tmp_path / "noetl.db"), workers=2) as runtime:
        runtime.tools.register(SetTool(), replace=True)
        odd = runtime.start(load_playbook_text(ODD, "odd.yaml").require(), source_text=ODD)
        loop = runtime.start(load_playbook_text(LOOP, "loop.yaml").require(), source_text=LOOP)
        with caplog.at_level(logging.ERROR, logger="noetl.runtime"):
            results = {r.execution_id: r for r in runtime.wait([odd, loop])}
        store = runtime.store
        assert results[loop].status is ExecutionStatus.OK
        assert results[odd].status is ExecutionStatus.FAIL
        assert results[odd].error is not None
        assert results[odd].error.startswith("internal error: TypeError")
        stored: Any = store.get_execution(odd)
        assert stored.status is ExecutionStatus.FAIL
        finished = [e for e in store.load_events(odd) if e.type == EventType.WORKFLOW_FINISHED]
        assert len(finished) == 1 and finished[0].payload["internal"] is True
    assert len(failures(caplog, odd)) == 1
