"""Event sources that start executions: JetStream subjects consumed by durable pull
consumers (`open_consumers`), each message handed to a synchronous handler whose verdict
(`Verdict`) says whether NATS forgets it (ack), drops it for good (term) or delivers it
again later (nak).

The handler runs in a thread of its own (it talks to the database); a message is
acknowledged only after it returns. nats-py is imported only by `open_consumers`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

__all__ = [
    "Consumers",
    "Handler",
    "Message",
    "Subscription",
    "Verdict",
    "durable_name",
    "open_consumers",
    "stream_name",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class Subscription:
    """Consume `subject` (in `stream`; None: the stream holding it, made when missing) on
    the NATS server at `url` for schedule `name`."""

    name: str
    url: str
    subject: str
    stream: str | None = None
    ack_wait_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Message:
    """One message: `key` names its delivery (its Nats-Msg-Id header, else
    `<stream>:<stream sequence>`), the same at each redelivery."""

    subject: str
    data: bytes
    key: str
    stream: str
    sequence: int
    published: float  # epoch seconds, as NATS stored it
    delivered: int  # 1 at the first delivery


class Verdict(StrEnum):
    ACK = "ack"  # done with (started, or a repeat of one started)
    TERM = "term"  # never deliver it again (it cannot start anything)
    NAK = "nak"  # deliver it again later (the database away, the schedule paused)


Handler = Callable[[Subscription, Message], Verdict]


class Consumers(Protocol):
    def sync(self, wanted: Collection[Subscription]) -> None:
        """Consume exactly these subscriptions from now on (starting and stopping
        consumers); never blocks on NATS."""

    def close(self) -> None: ...


def durable_name(schedule: str) -> str:
    """The durable consumer of a schedule: shared by every server, so each message goes to
    one of them. Characters NATS refuses become _, and a digest keeps names apart."""
    digest = hashlib.sha256(schedule.encode("utf-8")).hexdigest()[:8]
    return f"noetl_{_UNSAFE.sub('_', schedule)[:200]}_{digest}"


def stream_name(subject: str) -> str:
    """The stream made for a subject that no stream holds."""
    return "NOETL_TRIGGER_" + _UNSAFE.sub("_", subject).upper()[:180]


def open_consumers(handler: Handler, *, nak_delay_s: float = 5.0) -> Consumers:
    """Consumers on NATS JetStream handing each message to `handler`."""
    from noetl.bus.nats_consumers import NatsConsumers  # noqa: PLC0415 - nats loads only here

    return NatsConsumers(handler, nak_delay_s=nak_delay_s)
