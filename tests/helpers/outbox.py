"""Outbox relay helpers for tests: a table of the test's own, rows in it, and what a
JetStream stream holds."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from typing import Any

import nats
import nats.js.errors
import psycopg
from nats.js.api import StreamConfig

from noetl.outbox import create_table_sql


@dataclass(frozen=True)
class Names:
    """A table, stream and subject prefix unique to one test."""

    table: str
    stream: str
    prefix: str


def unique_names() -> Names:
    tag = uuid.uuid4().hex[:12]
    return Names(f"outbox_{tag}", f"NOETL_TEST_OUTBOX_{tag.upper()}", f"test_outbox_{tag}")


def create_table(db: str, table: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(create_table_sql(table))


def insert_rows(db: str, table: str, rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Insert (id, subject, payload) rows."""
    with psycopg.connect(db, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {table} (id, subject, payload) VALUES (%s, %s, %s::jsonb)",
            [(i, s, json.dumps(p)) for i, s, p in rows],
        )


def table_rows(db: str, table: str) -> dict[str, dict[str, Any]]:
    """Every row by id: status, attempts, last_error, delivered (a bool)."""
    with psycopg.connect(db, autocommit=True) as conn:
        found = conn.execute(
            f"SELECT id, status, attempts, last_error, delivered_at IS NOT NULL FROM {table}"
        ).fetchall()
    return {
        r[0]: {"status": r[1], "attempts": r[2], "last_error": r[3], "delivered": r[4]}
        for r in found
    }


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


def add_stream(url: str, stream: str, subjects: list[str]) -> None:
    async def add() -> None:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            cfg = StreamConfig(name=stream, subjects=subjects, duplicate_window=600)
            await nc.jetstream().add_stream(cfg)
        finally:
            await nc.close()

    _run(add())


def stream_messages(url: str, stream: str) -> list[tuple[str, str, bytes]]:
    """(subject, Nats-Msg-Id, data) of every message the stream holds; [] for no stream."""

    async def read() -> list[tuple[str, str, bytes]]:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            js = nc.jetstream()
            try:
                info = await js.stream_info(stream)
            except nats.js.errors.NotFoundError:
                return []
            out = []
            first = info.state.first_seq
            for seq in range(first, first + info.state.messages):
                msg = await js.get_msg(stream, seq)
                msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
                out.append((msg.subject, msg_id, msg.data or b""))
            return out
        finally:
            await nc.close()

    result: list[tuple[str, str, bytes]] = _run(read())
    return result


def delete_stream(url: str, stream: str) -> None:
    async def drop() -> None:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            await nc.jetstream().delete_stream(stream)
        except nats.js.errors.NotFoundError:
            pass
        finally:
            await nc.close()

    _run(drop())
