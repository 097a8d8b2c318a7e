"""Golden logs: replaying the recorded inputs through a fresh engine gives the recorded events.

A failure here means the engine now decides differently for the same inputs. If the change
is intended, re-record with `python -m tests.golden.record` and review the diff of
`tests/golden/logs/`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noetl.core import Event, EventType, Task
from noetl.decision.workloads import with_workload
from noetl.dsl import build_graph, load_playbook
from noetl.engine import Engine, fold

HERE = Path(__file__).resolve().parent
PLAYBOOKS = sorted((HERE / "playbooks").glob("*.yaml"))
NAMES = [p.stem for p in PLAYBOOKS]


def _log(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / "logs" / f"{name}.json").read_text("utf-8"))
    return data


def _engine(name: str) -> Engine:
    return Engine(build_graph(load_playbook(HERE / "playbooks" / f"{name}.yaml").require()))


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def test_every_playbook_has_a_log() -> None:
    assert len(NAMES) >= 5
    assert sorted(p.stem for p in (HERE / "logs").glob("*.json")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_replay_gives_the_recorded_events(name: str) -> None:
    log = _log(name)
    inputs = log["inputs"]
    engine = _engine(name)
    first = inputs[0]
    assert first["type"] == EventType.WORKFLOW_STARTED
    state = engine.new_state(first["execution_id"])
    decision = engine.start(state, first["payload"]["workload"], first["ts"])
    events = list(decision.events)
    for data in inputs[1:]:
        events += engine.decide(state, Event.from_dict(data), data["ts"]).events
    replayed = _as_json([e.to_dict() for e in events])
    recorded = log["events"]
    for index, (got, want) in enumerate(zip(replayed, recorded, strict=False)):
        assert got == want, f"event {index + 1} differs"
    assert len(replayed) == len(recorded)
    final = {
        "status": state.status.value,
        "steps": state.step_summaries(),
        "context": state.context,
    }
    assert _as_json(final) == log["final"]


@pytest.mark.parametrize("name", NAMES)
def test_fold_of_the_recorded_events_gives_the_recorded_final_state(name: str) -> None:
    log = _log(name)
    events = [Event.from_dict(d) for d in log["events"]]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    state = fold(_engine(name).new_state(events[0].execution_id), events)
    final = {
        "status": state.status.value,
        "steps": state.step_summaries(),
        "context": state.context,
    }
    assert final == log["final"]


@pytest.mark.parametrize("name", NAMES)
def test_logs_are_in_committed_form(name: str) -> None:
    path = HERE / "logs" / f"{name}.json"
    text = path.read_text("utf-8")
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=1, ensure_ascii=False) + "\n"


# Logs written before tasks stopped carrying a copy of the workload (their `context`
# held it; now the runtime adds it where the task runs, see noetl.decision.workloads).
LEGACY = sorted((HERE / "legacy").glob("*.json"))


@pytest.mark.parametrize("path", LEGACY, ids=[p.stem for p in LEGACY])
def test_older_logs_still_fold_and_their_tasks_keep_their_workload(path: Path) -> None:
    log = json.loads(path.read_text("utf-8"))
    events = [Event.from_dict(d) for d in log["events"]]
    name = path.stem.split("_")[0]
    state = fold(_engine(name).new_state(events[0].execution_id), events)
    final = {
        "status": state.status.value,
        "steps": state.step_summaries(),
        "context": state.context,
    }
    assert final == log["final"]
    assert state.workload == events[0].payload["workload"]
    tasks = [Task.from_dict(e.payload["task"]) for e in events if "task" in e.payload]
    assert tasks and all(t.context["workload"] == state.workload for t in tasks)
    # Such a task, still queued after an upgrade, runs with the copy it carries.
    assert all(with_workload(t, {"other": 1}) is t for t in tasks)
