"""The outbox relay: a process apart from the workers that claims the unsent rows of an
outbox table (PostgreSQL), publishes each to NATS JetStream with the row's id as its
`Nats-Msg-Id`, waits for the ack and marks the row sent; failed publishes are retried
with backoff and a row is dead-lettered after a number of attempts.

docs/operations.md ("The outbox relay") describes the table, the command and its metrics.
"""

from __future__ import annotations

from noetl.outbox.metrics import OutboxMetrics
from noetl.outbox.relay import OutboxRow, Publisher, PublishError, Relay, RelayConfig
from noetl.outbox.schema import create_table_sql, outbox_table

__all__ = [
    "OutboxMetrics",
    "OutboxRow",
    "PublishError",
    "Publisher",
    "Relay",
    "RelayConfig",
    "create_table_sql",
    "outbox_table",
]
