"""The outbox table the relay expects, and the statements it runs on it.

id              text primary key     the message id: sent as `Nats-Msg-Id`
subject         text not null        the subject, under the relay's prefix
payload         jsonb not null       the message body (published as JSON)
headers         jsonb                extra NATS headers (a map of strings), or null
created_at      timestamptz          when the intent was recorded (default now())
status          text                 pending | sent | dead (default pending)
attempts        integer              publish attempts so far (default 0)
next_attempt_at timestamptz          not claimed before this (default now())
last_error      text                 the last publish error, or null
delivered_at    timestamptz          when the publish was acknowledged, or null
"""

from __future__ import annotations

import re

from psycopg import sql

from noetl.errors import ConfigError

__all__ = [
    "CLAIM",
    "COUNT_UNSENT",
    "MARK_FAILED",
    "MARK_SENT",
    "STATUSES",
    "create_table_sql",
    "outbox_table",
]

STATUSES = ("pending", "sent", "dead")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")


def outbox_table(name: str) -> sql.Identifier:
    """The identifier of table `name` (`table` or `schema.table`); ConfigError otherwise."""
    if not _NAME.match(name):
        raise ConfigError(f"invalid outbox table name {name!r}: expected [schema.]table")
    return sql.Identifier(*name.split("."))


def create_table_sql(name: str) -> sql.Composed:
    """CREATE TABLE IF NOT EXISTS for the outbox `name`, with its index of pending rows."""
    table = outbox_table(name)
    index = sql.Identifier(name.replace(".", "_") + "_pending_idx")
    return sql.SQL(
        """
        CREATE TABLE IF NOT EXISTS {table} (
            id text PRIMARY KEY,
            subject text NOT NULL,
            payload jsonb NOT NULL,
            headers jsonb,
            created_at timestamptz NOT NULL DEFAULT now(),
            status text NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'sent', 'dead')),
            attempts integer NOT NULL DEFAULT 0,
            next_attempt_at timestamptz NOT NULL DEFAULT now(),
            last_error text,
            delivered_at timestamptz
        );
        CREATE INDEX IF NOT EXISTS {index} ON {table} (next_attempt_at, created_at)
            WHERE status = 'pending';
        """
    ).format(table=table, index=index)


# Rows locked by another relay are skipped, not waited for: relays share the table.
CLAIM = sql.SQL(
    """
    SELECT id, subject, payload, headers, attempts FROM {table}
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY created_at, id
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
    """
)

MARK_SENT = sql.SQL(
    """
    UPDATE {table} SET status = 'sent', delivered_at = now(), attempts = attempts + 1,
        last_error = NULL
    WHERE id = %(id)s
    """
)

MARK_FAILED = sql.SQL(
    """
    UPDATE {table} SET attempts = attempts + 1, last_error = %(error)s,
        status = CASE WHEN %(dead)s THEN 'dead' ELSE 'pending' END,
        next_attempt_at = now() + make_interval(secs => %(delay)s)
    WHERE id = %(id)s
    """
)

COUNT_UNSENT = sql.SQL(
    """
    SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)
    FROM {table} WHERE status = 'pending'
    """
)
