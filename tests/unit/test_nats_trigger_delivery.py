"""A `nats:` trigger's messages on the memory store, without NATS: the verdict of each
message (ack, term, nak), a message delivered again (its server died before the ack, or
between the claim and the start), which schedules are consumed."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Collection

import pytest

from noetl.bus.subscriptions import Message, Subscription, Verdict
from noetl.decision.records import new_execution_id
from noetl.decision.workloads import stored_workload
from noetl.dsl.triggers import Trigger
from noetl.runtime.nats_triggers import NatsTriggers
from noetl.runtime.orchestrator import Orchestrator
from noetl.store import MemoryStore
from noetl.store.base import ScheduleRecord, TickStatus
from tests.helpers.clock import FakeClock

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: orders, path: jobs/orders}
workload: {n: null}
workflow:
  - step: start
    tool: {kind: noop}
"""
NAME = "jobs/orders:created"
SUB = Subscription(NAME, "nats://127.0.0.1:4222", "orders.created")


class FakeConsumers:
    def __init__(self, handler: Callable[[Subscription, Message], Verdict]) -> None:
        self.handler = handler
        self.wanted: list[Subscription] = []
        self.closed = False

    def sync(self, wanted: Collection[Subscription]) -> None:
        self.wanted = list(wanted)

    def close(self) -> None:
        self.closed = True


class World:
    def __init__(self, **spec: object) -> None:
        self.clock = FakeClock()
        self.store = MemoryStore(clock=self.clock)
        self.store.register_playbook("jobs/orders", "orders", PLAYBOOK, self.clock())
        self.orchestrator = Orchestrator(self.store, owner="a", clock=self.clock)
        self.consumers: FakeConsumers | None = None
        self.triggers = NatsTriggers(
            self.orchestrator,
            owner="a",
            default_url="nats://127.0.0.1:4222",
            clock=self.clock,
            consumers=self.open,
        )
        trigger = {"name": "created", "nats": {"subject": "orders.created"}, **spec}
        self.store.schedules.put(ScheduleRecord(NAME, "jobs/orders", trigger))

    def open(self, handler: Callable[[Subscription, Message], Verdict]) -> FakeConsumers:
        self.consumers = FakeConsumers(handler)
        return self.consumers

    def executions(self) -> list[dict[str, object]]:
        return [
            stored_workload(self.store, r.execution_id)
            for r in self.store.list_executions(limit=100)
        ]

    def ticks(self) -> list[tuple[TickStatus, str | None]]:
        return [(t.status, t.error) for t in self.store.schedules.ticks(NAME, limit=100)]


def message(body: object, *, key: str = "ORDERS:1", delivered: int = 1) -> Message:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Message("orders.created", data, key, "ORDERS", 1, 1_700_000_000.0, delivered)


def test_a_message_starts_one_execution_with_its_body() -> None:
    world = World()
    assert world.triggers.handle(SUB, message({"n": 1})) is Verdict.ACK
    assert world.executions() == [{"n": 1}]
    assert world.ticks() == [(TickStatus.STARTED, None)]


def test_a_message_delivered_again_after_its_start_starts_nothing() -> None:
    world = World()
    assert world.triggers.handle(SUB, message({"n": 1})) is Verdict.ACK
    # its server died before the ack: NATS delivers it again, to this server or another
    assert world.triggers.handle(SUB, message({"n": 1}, delivered=2)) is Verdict.ACK
    assert world.executions() == [{"n": 1}]
    assert len(world.ticks()) == 1


def test_a_claim_without_its_execution_starts_it_with_the_claimed_id() -> None:
    world = World()
    # a server died between the claim and the start
    claimed = new_execution_id(world.clock())
    world.store.schedules.claim_delivery(NAME, "ORDERS:1", claimed)
    assert world.triggers.handle(SUB, message({"n": 3}, delivered=2)) is Verdict.ACK
    assert [r.execution_id for r in world.store.list_executions(limit=10)] == [claimed]


def test_a_malformed_message_is_terminated_and_recorded() -> None:
    world = World()
    assert world.triggers.handle(SUB, message(b"{oops")) is Verdict.TERM
    assert world.triggers.handle(SUB, message("text", key="ORDERS:2")) is Verdict.TERM
    assert world.executions() == []
    errors = sorted(str(error) for _, error in world.ticks())
    assert errors[0].startswith("the message is not JSON")
    assert errors[1] == "the message must be a JSON object, not str"


def test_a_workload_template_reads_the_message() -> None:
    world = World(workload={"n": "{{ message.body.id }}", "subject": "{{ message.subject }}"})
    assert world.triggers.handle(SUB, message({"id": 5})) is Verdict.ACK
    assert world.executions() == [{"n": 5, "subject": "orders.created"}]


def test_a_paused_or_deleted_schedule_delivers_the_message_again_later() -> None:
    world = World()
    world.store.schedules.set_paused(NAME, True)
    assert world.triggers.handle(SUB, message({"n": 1})) is Verdict.NAK
    world.store.schedules.delete(NAME)
    assert world.triggers.handle(SUB, message({"n": 1})) is Verdict.NAK
    assert world.executions() == []


def test_only_schedules_not_paused_are_consumed() -> None:
    world = World()
    other = {"name": "x", "nats": {"subject": "x.y", "url": "nats://other:4222"}}
    world.store.schedules.put(ScheduleRecord("jobs/orders:x", "jobs/orders", other))
    ticking = {"name": "t", "every": "10s"}
    world.store.schedules.put(ScheduleRecord("jobs/orders:t", "jobs/orders", ticking))

    def parsed() -> list[tuple[ScheduleRecord, Trigger]]:
        return [(s, Trigger.model_validate(s.spec)) for s in world.store.schedules.all()]

    world.triggers.sync(parsed())
    assert world.consumers is not None
    assert sorted((s.name, s.url, s.subject) for s in world.consumers.wanted) == [
        (NAME, "nats://127.0.0.1:4222", "orders.created"),
        ("jobs/orders:x", "nats://other:4222", "x.y"),
    ]
    world.store.schedules.set_paused(NAME, True)
    world.triggers.sync(parsed())
    assert [s.name for s in world.consumers.wanted] == ["jobs/orders:x"]
    world.triggers.close()
    assert world.consumers.closed


def test_without_any_url_nothing_is_consumed() -> None:
    world = World()
    world.triggers.default_url = None
    schedule = world.store.schedules.get(NAME)
    assert schedule is not None
    world.triggers.sync([(schedule, Trigger.model_validate(schedule.spec))])
    assert world.consumers is None


def test_without_the_nats_extra_the_server_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    world = World()
    monkeypatch.setitem(sys.modules, "nats", None)  # not importable
    schedule = world.store.schedules.get(NAME)
    assert schedule is not None
    for _ in range(3):
        world.triggers.sync([(schedule, Trigger.model_validate(schedule.spec))])
    assert world.consumers is None
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert said == [
        f"nats triggers not consumed ({NAME}): consuming a NATS subject, which needs an "
        "extra: pip install 'noetl[nats]'"
    ]
