"""The scheduler against a real SQLite store and orchestrator, on a fake clock: ticks
claimed once by two schedulers, the overlap and catch-up policies, a tick left pending by
a dead server, run-now, and schedules following a playbook's triggers block."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl.core import ExecutionStatus
from noetl.decision.workloads import stored_workload
from noetl.dsl import load_playbook_text
from noetl.runtime.orchestrator import Orchestrator
from noetl.runtime.schedule_sync import sync_playbook_schedules
from noetl.runtime.scheduler import Scheduler, SchedulerOptions
from noetl.store import SqliteStore
from noetl.store.base import ScheduleRecord, TickRecord, TickStatus
from tests.helpers.clock import FakeClock

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: ticked, path: jobs/ticked}
workload: {at: null, day: null}
workflow:
  - step: start
    tool: {kind: noop, args: {at: "{{ workload.at }}"}}
"""
OPTIONS = SchedulerOptions(grace=3.0, poll_s=0.1, recover_after_s=10.0)


class World:
    def __init__(self, path: Path) -> None:
        # Aligned to a 10 s tick, so `advance(10)` crosses exactly one.
        self.clock = FakeClock(start=1_700_000_000.0)
        self.store = SqliteStore(path, clock=self.clock)
        self.store.register_playbook("jobs/ticked", "ticked", PLAYBOOK, self.clock())
        self.orchestrator = Orchestrator(self.store, owner="a", clock=self.clock)

    def scheduler(self, owner: str) -> Scheduler:
        return Scheduler(
            self.store, self.orchestrator, owner=owner, clock=self.clock, options=OPTIONS
        )

    def schedule(self, **trigger: Any) -> None:
        spec = {"name": "t", "every": "10s", **trigger}
        self.store.schedules.put(ScheduleRecord("s", "jobs/ticked", spec))

    def ticks(self) -> list[tuple[float, str]]:
        return [
            (t.tick, t.status.value) for t in reversed(self.store.schedules.ticks("s", limit=100))
        ]

    def finish_all(self) -> None:
        for record in self.store.list_executions(limit=100):
            if not record.status.terminal:
                self.orchestrator.cancel(record.execution_id)
        self.orchestrator.run_once()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "noetl.db")
    yield w
    w.store.close()


def test_each_tick_is_started_once_by_two_schedulers(world: World) -> None:
    world.schedule(overlap="allow", workload={"at": "{{ tick.time }}", "day": "{{ tick.date }}"})
    a, b = world.scheduler("a"), world.scheduler("b")
    started = 0
    for _ in range(5):
        world.clock.advance(10)
        started += a.run_once() + b.run_once()
    assert started == 5
    ticks = world.store.schedules.ticks("s", limit=100)
    assert [t.status for t in ticks] == [TickStatus.STARTED] * 5
    assert len({t.execution_id for t in ticks}) == 5
    assert {t.owner for t in ticks} == {"a"}  # the first to look claims each
    newest = ticks[0]
    assert newest.execution_id is not None
    record = world.store.get_execution(newest.execution_id)
    assert record is not None and record.playbook_path == "jobs/ticked"
    workload = stored_workload(world.store, newest.execution_id)
    assert workload["at"].startswith("2023-11-14T22:")
    assert workload["at"].endswith("+00:00")
    assert workload["day"] == "2023-11-14"


def test_skip_skips_while_the_last_run_runs(world: World) -> None:
    world.schedule(overlap="skip")
    s = world.scheduler("a")
    for _ in range(3):
        world.clock.advance(10)
        s.run_once()
    assert [status for _, status in world.ticks()] == ["started", "skipped", "skipped"]
    world.finish_all()
    world.clock.advance(10)
    s.run_once()
    assert world.ticks()[-1][1] == "started"


def test_buffer_one_keeps_one_tick_until_the_run_ends(world: World) -> None:
    world.schedule(overlap="buffer_one")
    s = world.scheduler("a")
    for _ in range(3):
        world.clock.advance(10)
        s.run_once()
    assert [status for _, status in world.ticks()] == ["started", "buffered", "skipped"]
    world.finish_all()
    s.run_once()
    assert [status for _, status in world.ticks()] == ["started", "started", "skipped"]


def test_cancel_other_cancels_the_run_and_starts_when_it_ended(world: World) -> None:
    world.schedule(overlap="cancel_other")
    s = world.scheduler("a")
    world.clock.advance(10)
    s.run_once()
    first = world.store.schedules.ticks("s")[0].execution_id
    assert first is not None
    world.clock.advance(10)
    s.run_once()
    assert [status for _, status in world.ticks()] == ["started", "buffered"]
    world.orchestrator.run_once()  # decides the cancel
    first_record = world.store.get_execution(first)
    assert first_record is not None and first_record.status == ExecutionStatus.CANCELED
    s.run_once()
    assert [status for _, status in world.ticks()] == ["started", "started"]


@pytest.mark.parametrize(
    ("catchup", "expected"),
    [("none", []), ("latest", [50.0]), ("all", [10.0, 20.0, 30.0, 40.0, 50.0])],
)
def test_missed_ticks_follow_the_catchup_policy(
    world: World, catchup: str, expected: list[float]
) -> None:
    world.schedule(overlap="allow", catchup=catchup)
    created = world.store.schedules.get("s")
    assert created is not None
    base = created.created_at // 10 * 10
    world.clock.advance(55)  # nobody looked for 55 s: five ticks missed
    world.scheduler("a").run_once()
    assert [tick - base for tick, _ in world.ticks()] == expected


def test_a_paused_schedule_does_not_tick(world: World) -> None:
    world.schedule()
    world.store.schedules.set_paused("s", True)
    world.clock.advance(30)
    assert world.scheduler("a").run_once() == 0
    assert world.ticks() == []


def test_a_tick_left_pending_by_a_dead_server_starts_once_with_its_id(world: World) -> None:
    world.schedule()
    tick_ms = round((world.clock.now // 10 * 10 + 10) * 1000)
    # a server claimed the tick and died before creating its execution
    dead = TickRecord("s", tick_ms, TickStatus.PENDING, "1700000010000123456", "dead:1")
    assert world.store.schedules.claim_tick(dead)
    world.clock.advance(5)
    s = world.scheduler("a")
    s.run_once()
    assert world.store.get_execution("1700000010000123456") is None  # not yet: it may live
    world.clock.advance(10)  # the tick is due (claimed already) and pending for 15 s
    s.run_once()
    record = world.store.get_execution("1700000010000123456")
    assert record is not None
    by_ms = {t.tick_ms: t for t in world.store.schedules.ticks("s")}
    assert by_ms[tick_ms].status is TickStatus.STARTED
    assert len(world.store.list_executions(limit=100)) == 1
    s.run_once()
    assert len(world.store.list_executions(limit=100)) == 1


def test_run_now_and_a_missing_playbook(world: World) -> None:
    world.schedule()
    s = world.scheduler("a")
    execution_id = s.run_now("s")
    assert execution_id is not None and world.store.get_execution(execution_id) is not None
    manual = world.store.schedules.last_tick("s", manual=True)
    assert manual is not None and manual.status is TickStatus.STARTED
    assert world.store.schedules.last_tick("s") is None  # the time table did not move
    world.store.schedules.put(ScheduleRecord("gone", "jobs/none", {"name": "g", "every": "10s"}))
    world.clock.advance(10)
    s.run_once()
    failed = world.store.schedules.ticks("gone")
    assert [(t.status, t.error) for t in failed] == [
        (TickStatus.FAILED, "playbook 'jobs/none' is not registered")
    ]


def test_schedules_follow_the_playbook_triggers(world: World) -> None:
    with_triggers = PLAYBOOK + (
        "triggers:\n"
        "  - {name: hourly, cron: '0 * * * *', timezone: Europe/Berlin}\n"
        "  - {name: often, every: 30s, overlap: allow}\n"
    )
    playbook = load_playbook_text(with_triggers).require()
    made = sync_playbook_schedules(world.store, "jobs/ticked", playbook)
    assert [s.name for s in made] == ["jobs/ticked:hourly", "jobs/ticked:often"]
    assert made[0].spec == {"name": "hourly", "cron": "0 * * * *", "timezone": "Europe/Berlin"}
    world.store.schedules.set_paused("jobs/ticked:often", True)
    fewer = load_playbook_text(PLAYBOOK + "triggers:\n  - {name: often, every: 1m}\n").require()
    sync_playbook_schedules(world.store, "jobs/ticked", fewer)
    kept = world.store.schedules.all()
    assert [(s.name, s.paused, s.spec.get("every")) for s in kept] == [
        ("jobs/ticked:often", True, "1m")
    ]
