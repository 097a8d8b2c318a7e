"""`nats:` triggers against the real NATS JetStream and a real SQLite store: one
execution per message with its body as the workload, a repeated Nats-Msg-Id starting
nothing more, a malformed message failed (recorded, terminated) without stopping the next
ones, a paused schedule not consumed."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl.bus.subscriptions import durable_name, stream_name
from noetl.decision.workloads import stored_workload
from noetl.dsl import load_playbook_text
from noetl.observability.metrics import Metrics
from noetl.runtime.nats_triggers import NatsTriggers
from noetl.runtime.orchestrator import Orchestrator
from noetl.runtime.schedule_sync import sync_playbook_schedules
from noetl.runtime.scheduler import Scheduler
from noetl.store import SqliteStore
from noetl.store.base import TickStatus
from tests.distributed.cluster import wait_until
from tests.helpers.nats import (
    add_stream,
    consumer_config,
    consumer_state,
    delete_stream,
    publish,
)
from tests.helpers.nats_server import PrivateNats

pytestmark = [pytest.mark.services]

NAME = "jobs/orders:created"


def playbook(subject: str, stream: str | None = None) -> str:
    nats = {"subject": subject, **({"stream": stream} if stream else {})}
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: orders, path: jobs/orders}}
workload: {{n: null}}
triggers:
  - name: created
    nats: {json.dumps(nats)}
workflow:
  - step: start
    tool: {{kind: noop, args: {{n: "{{{{ workload.n }}}}"}}}}
"""


class World:
    def __init__(self, path: Path, url: str, subject: str, stream: str | None) -> None:
        self.url = url
        self.store = SqliteStore(path)
        self.orchestrator = Orchestrator(self.store, owner="server-a")
        self.metrics = Metrics()
        self.triggers = NatsTriggers(
            self.orchestrator,
            owner="server-a",
            default_url=url,
            clock=time.time,
            ack_wait_s=5,
            metrics=self.metrics,
        )
        self.scheduler = Scheduler(
            self.store, self.orchestrator, owner="server-a", events=self.triggers
        )
        text = playbook(subject, stream)
        loaded = load_playbook_text(text, "orders.yaml")
        assert loaded.ok and loaded.playbook is not None, [d.format() for d in loaded.errors]
        self.store.register_playbook("jobs/orders", "orders", text, time.time())
        sync_playbook_schedules(self.store, "jobs/orders", loaded.playbook)

    def workloads(self) -> list[dict[str, object]]:
        found = []
        for record in self.store.list_executions(limit=1000):
            found.append(stored_workload(self.store, record.execution_id))
        return found

    def ticks(self, status: TickStatus) -> list[str | None]:
        ticks = self.store.schedules.ticks(NAME, limit=1000)
        return [
            t.error if status is TickStatus.FAILED else t.execution_id
            for t in ticks
            if t.status is status
        ]

    def counted(self, outcome: str) -> float:
        labels = {"schedule": NAME, "outcome": outcome}
        return self.metrics.registry.get_sample_value("noetl_schedule_ticks_total", labels) or 0


@pytest.fixture
def subject() -> str:
    return f"noetl_test_{uuid.uuid4().hex[:12]}.orders"


@pytest.fixture
def world(tmp_path: Path, nats_url: str, subject: str) -> Iterator[World]:
    w = World(tmp_path / "noetl.db", nats_url, subject, None)
    try:
        yield w
    finally:
        w.triggers.close()
        w.store.close()
        delete_stream(nats_url, stream_name(subject))


def consume(world: World, stream: str | None = None) -> None:
    """A scheduler turn (it starts the schedule's consumer), then wait until the consumer
    (and the stream it makes) exists."""
    world.scheduler.run_once()
    subject = world.store.schedules.get(NAME).spec["nats"]["subject"]  # type: ignore[union-attr]

    def bound() -> bool:
        try:
            consumer_state(world.url, stream or stream_name(subject), durable_name(NAME))
        except Exception:
            return False
        return True

    wait_until(bound, 30, "the trigger's consumer")


def test_each_message_starts_one_execution_with_its_body(world: World, subject: str) -> None:
    consume(world)
    publish(world.url, subject, [json.dumps({"n": n}).encode() for n in range(20)])
    wait_until(lambda: len(world.ticks(TickStatus.STARTED)) >= 20, 60, "20 executions")
    time.sleep(0.5)  # nothing more comes
    assert sorted(w["n"] for w in world.workloads()) == list(range(20))  # type: ignore[type-var]
    started = world.ticks(TickStatus.STARTED)
    assert len(started) == 20 and len(set(started)) == 20
    assert world.counted("started") == 20
    state = consumer_state(world.url, stream_name(subject), durable_name(NAME))
    wait_until(
        lambda: (
            consumer_state(world.url, stream_name(subject), durable_name(NAME))["ack_pending"] == 0
        ),
        10,
        "every message acknowledged",
    )
    assert state["pending"] == 0


def test_a_malformed_message_fails_and_the_next_ones_start(world: World, subject: str) -> None:
    consume(world)
    publish(
        world.url,
        subject,
        [b"not json", b"[1, 2]", b'{"n": 1}', b'{"n": ' * 100 + b"1" + b"}" * 100, b'{"n": 2}'],
    )
    wait_until(lambda: len(world.ticks(TickStatus.STARTED)) >= 2, 30, "two executions")
    wait_until(lambda: len(world.ticks(TickStatus.FAILED)) >= 3, 30, "three failures")
    errors = sorted(str(e) for e in world.ticks(TickStatus.FAILED))
    assert errors[0].startswith("message.n.n.n"), errors  # too deep: the webhook's limit
    assert "the message must be a JSON object, not list" in errors
    assert any(e.startswith("the message is not JSON") for e in errors), errors
    assert sorted(w["n"] for w in world.workloads()) == [1, 2]  # type: ignore[type-var]
    assert world.counted("failed") == 3
    # terminated: never delivered again
    wait_until(
        lambda: (
            consumer_state(world.url, stream_name(subject), durable_name(NAME))["ack_pending"] == 0
        ),
        10,
        "no message waiting for its ack",
    )


def test_a_paused_schedule_is_not_consumed(world: World, subject: str) -> None:
    consume(world)
    publish(world.url, subject, [b'{"n": 1}'])
    wait_until(lambda: len(world.ticks(TickStatus.STARTED)) == 1, 30, "one execution")
    world.store.schedules.set_paused(NAME, True)
    consume(world)
    publish(world.url, subject, [b'{"n": 2}'])
    time.sleep(3)
    assert len(world.ticks(TickStatus.STARTED)) == 1
    world.store.schedules.set_paused(NAME, False)
    consume(world)
    wait_until(lambda: len(world.ticks(TickStatus.STARTED)) == 2, 30, "the held message")
    assert sorted(w["n"] for w in world.workloads()) == [1, 2]  # type: ignore[type-var]


def test_a_repeated_message_id_starts_one_execution(
    tmp_path: Path, nats_url: str, subject: str
) -> None:
    # The stream's own duplicate window is short, so NATS keeps both copies and the
    # delivery key in the database is what stops the second.
    stream = f"NOETL_TEST_{uuid.uuid4().hex[:12].upper()}"
    add_stream(nats_url, stream, [subject], duplicate_window=0.2)
    world = World(tmp_path / "noetl.db", nats_url, subject, stream)
    try:
        consume(world, stream)
        first = publish(nats_url, subject, [b'{"n": 7}'], msg_ids=["order-7"])
        wait_until(lambda: len(world.ticks(TickStatus.STARTED)) == 1, 30, "one execution")
        time.sleep(0.5)
        again = publish(nats_url, subject, [b'{"n": 7}'], msg_ids=["order-7"])
        assert again[0] > first[0]  # stored twice by NATS
        wait_until(lambda: world.counted("duplicate") == 1, 30, "the repeat seen")
        assert world.workloads() == [{"n": 7}]
        assert consumer_state(nats_url, stream, durable_name(NAME))["pending"] == 0
    finally:
        world.triggers.close()
        world.store.close()
        delete_stream(nats_url, stream)


def test_nats_away_is_retried_and_logged_once(
    tmp_path: Path, subject: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = PrivateNats(tmp_path)
    server.start()
    world = World(tmp_path / "noetl.db", server.url, subject, None)
    try:
        consume(world)
        publish(server.url, subject, [b'{"n": 1}'])
        wait_until(lambda: len(world.ticks(TickStatus.STARTED)) == 1, 30, "one execution")
        with caplog.at_level(logging.INFO, logger="noetl.triggers"):
            server.stop()
            time.sleep(4)  # several retries
            world.scheduler.run_once()  # the scheduler goes on meanwhile
            server.start()
            wait_until(
                lambda: any("consuming again" in r.getMessage() for r in caplog.records),
                30,
                "the consumer back",
            )
        outage = [r for r in caplog.records if "cannot consume" in r.getMessage()]
        assert len(outage) == 1, [r.getMessage() for r in caplog.records]
        publish(server.url, subject, [b'{"n": 2}'])
        wait_until(lambda: len(world.ticks(TickStatus.STARTED)) == 2, 30, "the next execution")
        assert sorted(w["n"] for w in world.workloads()) == [1, 2]  # type: ignore[type-var]
    finally:
        world.triggers.close()
        world.store.close()
        server.stop()


def test_two_servers_share_the_messages_each_starts_once(world: World, subject: str) -> None:
    other = NatsTriggers(
        Orchestrator(world.store, owner="server-b"),
        owner="server-b",
        default_url=world.url,
        clock=time.time,
        ack_wait_s=5,
    )
    scheduler_b = Scheduler(world.store, other.orchestrator, owner="server-b", events=other)
    try:
        consume(world)
        scheduler_b.run_once()  # the same durable consumer, from a second connection
        publish(world.url, subject, [json.dumps({"n": n}).encode() for n in range(40)])
        wait_until(lambda: len(world.ticks(TickStatus.STARTED)) >= 40, 60, "40 executions")
        time.sleep(0.5)
        assert sorted(w["n"] for w in world.workloads()) == list(range(40))  # type: ignore[type-var]
        owners = {t.owner for t in world.store.schedules.ticks(NAME, limit=100)}
        assert owners <= {"server-a", "server-b"}
    finally:
        other.close()


def test_a_trigger_moved_to_another_subject_follows_it(
    tmp_path: Path, nats_url: str, subject: str
) -> None:
    stream = f"NOETL_TEST_{uuid.uuid4().hex[:12].upper()}"
    prefix = subject.rsplit(".", 1)[0]
    add_stream(nats_url, stream, [f"{prefix}.>"], duplicate_window=60)
    world = World(tmp_path / "noetl.db", nats_url, f"{prefix}.a", stream)
    try:
        consume(world, stream)
        publish(nats_url, f"{prefix}.a", [b'{"n": 1}'])
        wait_until(lambda: len(world.ticks(TickStatus.STARTED)) == 1, 30, "one execution")
        schedule = world.store.schedules.get(NAME)
        assert schedule is not None
        spec = {**schedule.spec, "nats": {"subject": f"{prefix}.b", "stream": stream}}
        world.store.schedules.put(dataclasses.replace(schedule, spec=spec))

        def filtered() -> bool:
            world.scheduler.run_once()
            info = consumer_config(nats_url, stream, durable_name(NAME))
            return info == f"{prefix}.b"

        wait_until(filtered, 30, "the consumer moved to the new subject")
        publish(nats_url, f"{prefix}.a", [b'{"n": 2}'])  # no longer its subject
        publish(nats_url, f"{prefix}.b", [b'{"n": 3}'])
        wait_until(lambda: len(world.ticks(TickStatus.STARTED)) == 2, 30, "the new subject")
        time.sleep(1)
        assert sorted(w["n"] for w in world.workloads()) == [1, 3]  # type: ignore[type-var]
    finally:
        world.triggers.close()
        world.store.close()
        delete_stream(nats_url, stream)
