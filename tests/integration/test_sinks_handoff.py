"""Sinks handed off to a pool of their own (`sinks.in_worker: false`,
`EngineOptions.sinks_pool`): the tool's task runs without its sinks, a `sinks` task
writes its result, and the step finishes with that task's outcome. Embedded, where both
run in this process; the distributed form is in tests/distributed/test_sinks_in_server.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from noetl.core import Event, EventType
from noetl.dsl.validate import load_playbook_text
from noetl.engine.options import EngineOptions
from noetl.paths import Roots
from noetl.runtime.local import embedded_runtime
from noetl.store import open_store

LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: handed_off}
workload: {n: 3}
workflow:
  - step: start
    next: [{step: fan}]
  - step: fan
    loop: {in: "{{ range(workload.n) | list }}", iterator: i}
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              return {"i": args["i"], "sq": args["i"] * args["i"]}
      args: {i: "{{ i }}"}
    result:
      pick: "{{ this.sq }}"
      as: squares
      sink:
        - kind: file
          spec: {path: "out/item{{ i }}.json", format: json}
    next: [{step: end}]
  - step: end
"""
FAILING_SINK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sink_fails}
workflow:
  - step: start
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              return {"x": 1}
    retry: {max_attempts: 3, initial_delay: 0.01}
    result:
      sink:
        - kind: file
          retry: {max_attempts: 1}
          spec: {path: "../outside.json", format: json}
"""
CASE = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: case_sink}
workflow:
  - step: start
    tool:
      kind: python
      spec:
        code: |
          def main(context, args):
              return {"v": 7}
    case:
      - when: "{{ this.v == 7 }}"
        then:
          sink:
            - kind: file
              spec: {path: "case.json", format: json}
"""


def _run(tmp_path: Path, text: str, pool: str | None) -> tuple[str, list[Event]]:
    db = str(tmp_path / "h.db")
    roots = Roots.of(str(tmp_path), str(tmp_path), str(tmp_path))
    options = EngineOptions(sinks_pool=pool)
    with embedded_runtime(db, workers=2, options=options, roots=roots) as rt:
        execution_id = rt.start(load_playbook_text(text, "p.yaml").require(), source_text=text)
        rt.wait([execution_id])
    store = open_store(db)
    try:
        status = store.get_execution(execution_id).status
        return str(status), store.load_events(execution_id)
    finally:
        store.close()


def _of(events: list[Event], kind: str) -> list[dict[str, Any]]:
    return [e.payload for e in events if e.type == kind]


def test_a_loops_sinks_run_in_tasks_of_their_pool_after_each_tool(tmp_path: Path) -> None:
    status, events = _run(tmp_path, LOOP, "server-sinks")
    assert status == "ok"
    for i in range(3):
        assert json.loads((tmp_path / "out" / f"item{i}.json").read_text()) == i * i
    handed = _of(events, EventType.SINK_STARTED)
    assert sorted(p["index"] for p in handed) == [0, 1, 2]
    for sent in handed:
        task = sent["task"]
        assert task["kind"] == "sinks" and task["pool"] == "server-sinks"
        assert task["task_id"] == f"{sent['from']}.sinks"
        assert task["args"] == {"this": {"i": sent["index"], "sq": sent["index"] ** 2}}
    dispatched = [p["task"] for p in _of(events, EventType.LOOP_ITERATION_STARTED) if "task" in p]
    assert all(t["sinks_pool"] == "server-sinks" and "pool" not in t for t in dispatched)
    processed = _of(events, EventType.TOOL_PROCESSED)
    tools = [p for p in processed if not p["task_id"].endswith(".sinks")]
    writes = [p for p in processed if p["task_id"].endswith(".sinks")]
    assert len(tools) == 3 and len(writes) == 3
    assert all("sinks" not in p for p in tools)  # the tool's worker wrote nothing
    assert all(p["sinks"][0]["status"] == "ok" for p in writes)
    finished = _of(events, EventType.STEP_FINISHED)
    assert [p["result"] for p in finished if p.get("saved_as") == "squares"] == [[0, 1, 4]]


def test_without_a_sinks_pool_the_worker_writes_as_before(tmp_path: Path) -> None:
    status, events = _run(tmp_path, LOOP, None)
    assert status == "ok"
    assert json.loads((tmp_path / "out" / "item2.json").read_text()) == 4
    assert _of(events, EventType.SINK_STARTED) == []
    assert all("sinks" in p for p in _of(events, EventType.TOOL_PROCESSED))


def test_a_failed_sink_retries_its_sinks_task_not_the_tool(tmp_path: Path) -> None:
    status, events = _run(tmp_path, FAILING_SINK, "server-sinks")
    assert status == "fail"
    processed = _of(events, EventType.TOOL_PROCESSED)
    tools = [p for p in processed if not p["task_id"].endswith(".sinks")]
    writes = [p for p in processed if p["task_id"].endswith(".sinks")]
    assert len(tools) == 1 and tools[0]["ok"] is True  # the tool ran once
    assert writes and all(p["ok"] is False for p in writes)
    assert "outside" in writes[-1]["error"]
    dead = _of(events, EventType.TASK_DEAD_LETTERED)
    assert [p["task_id"] for p in dead] == [writes[-1]["task_id"]]
    assert not (tmp_path.parent / "outside.json").exists()


def test_a_case_branch_write_goes_to_the_sinks_pool_whole(tmp_path: Path) -> None:
    status, events = _run(tmp_path, CASE, "server-sinks")
    assert status == "ok"
    assert json.loads((tmp_path / "case.json").read_text()) == {"v": 7}
    branch = [p["task"] for p in _of(events, EventType.CASE_BRANCH_STARTED) if "task" in p]
    assert len(branch) == 1
    assert branch[0]["pool"] == "server-sinks" and "sinks_pool" not in branch[0]
