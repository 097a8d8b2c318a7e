"""Record the golden event logs: `python -m tests.golden.record`.

For each playbook in `tests/golden/playbooks/*.yaml`, drive the engine with a deterministic
fake worker and write `tests/golden/logs/<name>.json`:

    {"inputs": [the input events fed, in order],
     "events": [every event the engine emitted],
     "final":  {"status", "steps", "context"}}

The first input is `workflow.started` (its payload is the workload given to
`Engine.start`); every input's `ts` is the `now` it was fed with. `test_golden.py` replays
the inputs through a fresh engine and expects the same events, byte for byte.

The fake worker never runs a playbook's code. Every task (python or not) returns
`{"key": <task key>, "args": <rendered args>}` (and `"attempt"` from its second attempt on),
unless its args carry a truthy `fail`, in which case it fails with that text as the error.
A retried task (`RequeueTask`) is pending again with its next attempt. Labels in the
playbook's metadata steer the run: `golden_order: fifo|lifo` (which pending task completes
next; fifo by default) and `golden_cancel_after: N` (request a cancel after N results).
After the execution ends, the results of the tasks it canceled arrive late (and must be
discarded), and a cancelled execution receives a second cancel request.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from noetl.core import CancelTasks, Decision, EnqueueTask, Event, EventType, RequeueTask, Task
from noetl.dsl import build_graph, load_playbook
from noetl.engine import Engine

HERE = Path(__file__).resolve().parent
PLAYBOOKS = HERE / "playbooks"
LOGS = HERE / "logs"
EXECUTION_ID = "golden-0001"


def worker(task: Task) -> dict[str, Any]:
    """The deterministic fake worker: the `tool.processed` payload for a task."""
    failure = task.args.get("fail")
    if failure:
        return {"task_id": task.task_id, "ok": False, "this": None, "error": str(failure)}
    this = {"key": task.key, "args": task.args}
    if task.attempt > 1:
        this["attempt"] = task.attempt
    return {"task_id": task.task_id, "ok": True, "this": this, "error": None}


class Recorder:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.state = engine.new_state(EXECUTION_ID)
        self.inputs: list[Event] = []
        self.events: list[Event] = []
        self.pending: list[Task] = []
        self.canceled: list[Task] = []
        self.tasks: dict[str, Task] = {}

    def _absorb(self, decision: Decision) -> None:
        self.events.extend(decision.events)
        for command in decision.commands:
            if isinstance(command, EnqueueTask):
                self.pending.append(command.task)
                self.tasks[command.task.task_id] = command.task
            elif isinstance(command, CancelTasks):
                self.canceled += [t for t in self.pending if t.task_id in command.task_ids]
                self.pending = [t for t in self.pending if t.task_id not in command.task_ids]
            elif isinstance(command, RequeueTask):  # a retry: the same task, next attempt
                first = self.tasks[command.task_id]
                self.pending.append(dataclasses.replace(first, attempt=command.attempt))

    def start(self, workload: dict[str, Any]) -> None:
        payload = {"workload": workload}
        self.inputs.append(
            Event(0, EventType.WORKFLOW_STARTED.value, EXECUTION_ID, 0.0, None, payload)
        )
        self._absorb(self.engine.start(self.state, workload, 0.0))

    def feed(self, event_type: EventType, step: str | None, payload: dict[str, Any]) -> None:
        now = float(len(self.inputs))
        event = Event(0, event_type.value, EXECUTION_ID, now, step, payload)
        self.inputs.append(event)
        self._absorb(self.engine.decide(self.state, event, now))

    def complete(self, task: Task) -> None:
        self.pending.remove(task)
        self.feed(EventType.TOOL_PROCESSED, task.step, worker(task))

    def cancel(self) -> None:
        self.feed(EventType.CANCEL_REQUESTED, None, {"reason": "golden test"})


def record(path: Path) -> dict[str, Any]:
    """Run one playbook; return its golden log."""
    playbook = load_playbook(path).require()
    labels = playbook.metadata.labels
    order = labels.get("golden_order", "fifo")
    cancel_after = int(labels.get("golden_cancel_after", "0"))
    recorder = Recorder(Engine(build_graph(playbook)))
    recorder.start(dict(playbook.workload))
    results = 0
    while recorder.pending and not recorder.state.terminal:
        if cancel_after and results == cancel_after:
            recorder.cancel()
            continue
        recorder.complete(recorder.pending[0] if order == "fifo" else recorder.pending[-1])
        results += 1
    assert recorder.state.terminal, f"{path.name}: the execution did not end"
    if recorder.state.status == "canceled":
        recorder.cancel()  # a second cancel: nothing happens
    for task in list(recorder.canceled):  # late results: discarded
        recorder.feed(EventType.TOOL_PROCESSED, task.step, worker(task))
    state = recorder.state
    return {
        "inputs": [e.to_dict() for e in recorder.inputs],
        "events": [e.to_dict() for e in recorder.events],
        "final": {
            "status": state.status.value,
            "steps": state.step_summaries(),
            "context": state.context,
        },
    }


def dumps(log: dict[str, Any]) -> str:
    """The committed form: sorted keys, indent 1, a final newline."""
    return json.dumps(log, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    LOGS.mkdir(exist_ok=True)
    for path in sorted(PLAYBOOKS.glob("*.yaml")):
        log = record(path)
        target = LOGS / f"{path.stem}.json"
        target.write_text(dumps(log), encoding="utf-8")
        final = log["final"]
        print(
            f"{target.relative_to(HERE.parent.parent)}: {final['status']}, "
            f"{len(log['inputs'])} inputs, {len(log['events'])} events"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
