"""The outbox relay against the real PostgreSQL and NATS JetStream: every row published
once and marked sent, a failed publish retried, a row dead after its last attempt, a lost
database connection made again. (The
relay killed mid-pass is tests/distributed/test_outbox_relay_faults.py.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from noetl.errors import ConfigError
from noetl.outbox import OutboxMetrics, Publisher, PublishError, Relay, RelayConfig
from noetl.outbox.jetstream import JetStreamPublisher, connect, ensure_stream
from noetl.outbox.service import serve
from tests.helpers.outbox import (
    Names,
    create_table,
    delete_stream,
    insert_rows,
    stream_messages,
    table_rows,
    unique_names,
)


@pytest.fixture
def names(nats_url: str, pg_empty_database: str) -> Iterator[Names]:
    made = unique_names()
    create_table(pg_empty_database, made.table)
    yield made
    delete_stream(nats_url, made.stream)


class Flaky:
    """A publisher that fails the first `failures[id]` publishes of a message."""

    def __init__(self, inner: Publisher, failures: dict[str, int]) -> None:
        self.inner = inner
        self.failures = dict(failures)
        self.calls: list[str] = []

    async def publish(
        self, subject: str, payload: bytes, msg_id: str, headers: dict[str, str]
    ) -> None:
        self.calls.append(msg_id)
        if self.failures.get(msg_id, 0) > 0:
            self.failures[msg_id] -= 1
            raise PublishError("broker unreachable")
        await self.inner.publish(subject, payload, msg_id, headers)


def relay_passes(
    db: str,
    nats_url: str,
    names: Names,
    config: RelayConfig,
    *,
    passes: int,
    wrap: Any = None,
    stream_subjects: list[str] | None = None,
) -> tuple[list[int], OutboxMetrics]:
    """Run `passes` passes of a relay (waiting for the backoff in between); the rows
    claimed by each."""
    metrics = OutboxMetrics()

    async def go() -> list[int]:
        nc = await connect(nats_url)
        try:
            subjects = stream_subjects or [f"{names.prefix}.>"]
            await ensure_stream(nc, names.stream, subjects, 600)
            publisher: Publisher = JetStreamPublisher(nc, timeout_s=2)
            if wrap is not None:
                publisher = wrap(publisher)
            async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
                relay = Relay(conn, publisher, config, metrics, rng=lambda: 0.0)
                claimed = []
                for _ in range(passes):
                    claimed.append(await relay.run_once())
                    await asyncio.sleep(0.05)
                return claimed
        finally:
            await nc.close()

    return asyncio.run(asyncio.wait_for(go(), 60)), metrics


def value(metrics: OutboxMetrics, name: str, table: str) -> float | None:
    return metrics.registry.get_sample_value(name, {"table": table})


def test_every_row_is_published_once_and_marked_sent(
    pg_empty_database: str, nats_url: str, names: Names
) -> None:
    db = pg_empty_database
    rows = [(f"order_placed:o-{i}", "orders", {"order": i}) for i in range(25)]
    insert_rows(db, names.table, rows)
    config = RelayConfig(table=names.table, subject_prefix=names.prefix, batch=10)

    claimed, metrics = relay_passes(db, nats_url, names, config, passes=5)

    assert claimed == [10, 10, 5, 0, 0]
    state = table_rows(db, names.table)
    assert {r["status"] for r in state.values()} == {"sent"}
    assert all(r["delivered"] and r["attempts"] == 1 for r in state.values())
    messages = stream_messages(nats_url, names.stream)
    assert sorted(m[1] for m in messages) == sorted(r[0] for r in rows)
    assert {m[0] for m in messages} == {f"{names.prefix}.orders"}
    by_id = {m[1]: json.loads(m[2]) for m in messages}
    assert by_id["order_placed:o-7"] == {"order": 7}
    assert value(metrics, "noetl_outbox_published_total", names.table) == 25
    assert value(metrics, "noetl_outbox_unsent", names.table) == 0

    # Another relay finds nothing to do: nothing is published twice.
    claimed, _ = relay_passes(db, nats_url, names, config, passes=1)
    assert claimed == [0]
    assert len(stream_messages(nats_url, names.stream)) == 25


def test_a_failed_publish_is_retried_with_backoff_then_delivered(
    pg_empty_database: str, nats_url: str, names: Names
) -> None:
    db = pg_empty_database
    insert_rows(db, names.table, [("a", "orders", {"n": 1}), ("b", "orders", {"n": 2})])
    config = RelayConfig(
        table=names.table, subject_prefix=names.prefix, backoff_initial_s=0.01, max_attempts=5
    )
    flaky: list[Flaky] = []

    def wrap(inner: Publisher) -> Flaky:
        flaky.append(Flaky(inner, {"a": 2}))
        return flaky[0]

    claimed, metrics = relay_passes(db, nats_url, names, config, passes=4, wrap=wrap)

    assert claimed == [2, 1, 1, 0]
    assert flaky[0].calls == ["a", "b", "a", "a"]
    state = table_rows(db, names.table)
    assert state["a"] == {"status": "sent", "attempts": 3, "last_error": None, "delivered": True}
    assert state["b"]["attempts"] == 1
    assert sorted(m[1] for m in stream_messages(nats_url, names.stream)) == ["a", "b"]
    assert value(metrics, "noetl_outbox_publish_failures_total", names.table) == 2
    assert value(metrics, "noetl_outbox_published_total", names.table) == 2


def test_a_failing_row_waits_for_its_backoff(
    pg_empty_database: str, nats_url: str, names: Names
) -> None:
    db = pg_empty_database
    insert_rows(db, names.table, [("a", "orders", {})])
    config = RelayConfig(table=names.table, subject_prefix=names.prefix, backoff_initial_s=60)
    claimed, metrics = relay_passes(
        db, nats_url, names, config, passes=3, wrap=lambda inner: Flaky(inner, {"a": 1})
    )
    assert claimed == [1, 0, 0]
    assert table_rows(db, names.table)["a"]["status"] == "pending"
    assert value(metrics, "noetl_outbox_unsent", names.table) == 1


def test_a_row_is_dead_lettered_after_max_attempts(
    pg_empty_database: str, nats_url: str, names: Names
) -> None:
    db = pg_empty_database
    # No stream takes `<prefix>.nowhere`: JetStream has no responder, a real failure.
    insert_rows(db, names.table, [("lost", "nowhere", {}), ("ok", "orders", {})])
    config = RelayConfig(
        table=names.table, subject_prefix=names.prefix, max_attempts=3, backoff_initial_s=0
    )
    claimed, metrics = relay_passes(
        db,
        nats_url,
        names,
        config,
        passes=5,
        stream_subjects=[f"{names.prefix}.orders"],
    )

    assert claimed == [2, 1, 1, 0, 0]
    state = table_rows(db, names.table)
    assert state["lost"]["status"] == "dead"
    assert state["lost"]["attempts"] == 3
    assert state["lost"]["last_error"]
    assert not state["lost"]["delivered"]
    assert state["ok"]["status"] == "sent"
    assert [m[1] for m in stream_messages(nats_url, names.stream)] == ["ok"]
    assert value(metrics, "noetl_outbox_dead_lettered_total", names.table) == 1
    assert value(metrics, "noetl_outbox_publish_failures_total", names.table) == 3
    assert value(metrics, "noetl_outbox_unsent", names.table) == 0


def test_the_relay_reconnects_after_losing_the_database(
    pg_empty_database: str, nats_url: str, names: Names
) -> None:
    db = pg_empty_database
    insert_rows(db, names.table, [("a", "orders", {})])
    config = RelayConfig(table=names.table, subject_prefix=names.prefix, poll_s=0.05)
    metrics = OutboxMetrics()

    async def go() -> int:
        nc = await connect(nats_url)
        stopping = asyncio.Event()
        try:
            await ensure_stream(nc, names.stream, [f"{names.prefix}.>"], 600)

            async def connect_db() -> psycopg.AsyncConnection[Any]:
                return await psycopg.AsyncConnection.connect(
                    db, autocommit=True, application_name=names.table
                )

            task = asyncio.create_task(
                serve(connect_db, JetStreamPublisher(nc), config, metrics, stopping)
            )
            await until(lambda: table_rows(db, names.table)["a"]["status"] == "sent")
            with psycopg.connect(db, autocommit=True) as admin:
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (names.table,),
                )
            insert_rows(db, names.table, [("b", "orders", {})])
            await until(lambda: table_rows(db, names.table)["b"]["status"] == "sent")
            stopping.set()
            return await task
        finally:
            await nc.close()

    total = asyncio.run(asyncio.wait_for(go(), 60))
    assert total == 2
    assert sorted(m[1] for m in stream_messages(nats_url, names.stream)) == ["a", "b"]


def test_a_missing_table_is_a_config_error(pg_empty_database: str, nats_url: str) -> None:
    config = RelayConfig(table="no_such_outbox", subject_prefix="test_outbox_missing")

    async def go() -> int:
        nc = await connect(nats_url)
        try:

            async def connect_db() -> psycopg.AsyncConnection[Any]:
                return await psycopg.AsyncConnection.connect(pg_empty_database, autocommit=True)

            return await serve(
                connect_db, JetStreamPublisher(nc), config, OutboxMetrics(), asyncio.Event()
            )
        finally:
            await nc.close()

    with pytest.raises(ConfigError, match="noetl outbox init"):
        asyncio.run(asyncio.wait_for(go(), 30))


async def until(check: Any, timeout: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)
