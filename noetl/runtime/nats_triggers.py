"""`nats:` triggers: one execution per message on a JetStream subject, exactly once.

Every server whose scheduler runs consumes the subject of each `nats:` schedule that is
not paused, through one durable pull consumer per schedule (`noetl.bus.subscriptions`), so
the servers share the messages and each message goes to one of them. For a message:

1. Its body must be a JSON object within the limits a webhook's body has; anything else
   fails the delivery (a `failed` tick with the reason) and the message is terminated:
   NATS never delivers it again, and the next messages go on.
2. Its delivery key (its `Nats-Msg-Id` header, else `<stream>:<sequence>`) is claimed in
   `schedule_delivery` with the execution id chosen before the execution starts (the
   webhook's `start_once`), then the execution is created with that id.
3. Only then is the message acknowledged. A server killed between 2 and 3 leaves it
   unacknowledged: NATS delivers it again (after `triggers.nats_ack_wait_s`) to any server,
   which finds the claim and its execution and acknowledges it without starting another
   (`duplicate`); a claim without its execution (killed between the claim and the start)
   starts the execution with the claimed id.

The database away, or the schedule paused meanwhile: the message is delivered again later
(nak with a delay). Outcomes are counted in `noetl_schedule_ticks_total{schedule,outcome}`
(`started`, `failed`, `duplicate`) and logged as `schedule_tick` events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from noetl.bus.subscriptions import (
    Consumers,
    Message,
    Subscription,
    Verdict,
    open_consumers,
)
from noetl.core import NotFoundError, StoreUnavailableError
from noetl.dsl.limits import json_object
from noetl.dsl.render import Renderer
from noetl.dsl.triggers import Trigger
from noetl.errors import NoetlError
from noetl.extras import installed, needs_extra
from noetl.observability.logging import log_event
from noetl.observability.metrics import Metrics
from noetl.runtime.orchestrator import Orchestrator
from noetl.runtime.scheduler import tick_context
from noetl.runtime.webhooks import start_once
from noetl.store.base import ScheduleRecord, TickRecord, TickStatus

__all__ = ["NatsTriggers"]

log = logging.getLogger("noetl.scheduler")
Clock = Callable[[], float]
# Tries at recording a message's outcome under a tick time of its own (two messages may
# carry the same millisecond).
RECORD_TRIES = 50


class NatsTriggers:
    """Consumes the subjects of the `nats:` schedules of `orchestrator`'s store (see the
    module). `default_url`: the NATS server of a trigger without its own `url`."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        *,
        owner: str,
        default_url: str | None,
        clock: Clock,
        ack_wait_s: float = 30.0,
        metrics: Metrics | None = None,
        consumers: Callable[[Callable[[Subscription, Message], Verdict]], Consumers] = (
            open_consumers
        ),
    ) -> None:
        self.orchestrator = orchestrator
        self.owner = owner
        self.default_url = default_url
        self.clock = clock
        self.ack_wait_s = ack_wait_s
        self.metrics = metrics
        self._open = consumers
        self._consumers: Consumers | None = None
        self._renderer = Renderer()
        self._warned: set[str] = set()

    # --- which subjects --------------------------------------------------------------

    def sync(self, schedules: Iterable[tuple[ScheduleRecord, Trigger]]) -> None:
        """Consume the subjects of these schedules' `nats:` triggers (paused ones not)."""
        wanted: list[Subscription] = []
        for schedule, trigger in schedules:
            if trigger.nats is None or schedule.paused:
                continue
            url = trigger.nats.url or self.default_url
            if url is None:
                self._warn_once(
                    f"url:{schedule.name}",
                    f"nats trigger {schedule.name}: no NATS server (set triggers.nats_url "
                    "or bus.url, or the trigger's url); not consumed",
                )
                continue
            wanted.append(
                Subscription(
                    schedule.name, url, trigger.nats.subject, trigger.nats.stream, self.ack_wait_s
                )
            )
        if not wanted and self._consumers is None:
            return
        if not installed("nats"):
            names = ", ".join(sub.name for sub in wanted)
            what = f"nats triggers not consumed ({names}): consuming a NATS subject"
            self._warn_once("extra", needs_extra(what, "nats"))
            return
        if self._consumers is None:
            self._consumers = self._open(self.handle)
        self._consumers.sync(wanted)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.error("%s", message)

    def close(self) -> None:
        if self._consumers is not None:
            self._consumers.close()
            self._consumers = None

    # --- one message -----------------------------------------------------------------

    def handle(self, sub: Subscription, message: Message) -> Verdict:
        """Start the execution of one message, once (see the module); its verdict."""
        try:
            return self._handle(sub, message)
        except StoreUnavailableError as exc:
            log.warning("nats trigger %s: database unavailable (%s); later", sub.name, exc)
            return Verdict.NAK

    def _handle(self, sub: Subscription, message: Message) -> Verdict:
        store = self.orchestrator.store
        schedule = store.schedules.get(sub.name)
        if schedule is None or schedule.paused:
            return Verdict.NAK  # its consumer stops at the scheduler's next turn
        now = self.clock()
        try:
            trigger = Trigger.model_validate(schedule.spec)
            body = json_object(message.data, root="message")
            workload = self._workload(schedule, trigger, body, message, now)
            delivery = start_once(self.orchestrator, schedule, workload, key=message.key, now=now)
        except StoreUnavailableError:
            raise
        except (NoetlError, NotFoundError, ValueError) as exc:
            self._record(schedule.name, message, TickStatus.FAILED, None, str(exc))
            return Verdict.TERM
        if delivery.replayed:
            self._decided(schedule.name, message, "duplicate", delivery.execution_id)
        else:
            self._record(schedule.name, message, TickStatus.STARTED, delivery.execution_id)
        return Verdict.ACK

    def _workload(
        self,
        schedule: ScheduleRecord,
        trigger: Trigger,
        body: dict[str, Any],
        message: Message,
        now: float,
    ) -> dict[str, Any]:
        """The trigger's `workload` rendered with `message` when it has one, else the
        message's body itself."""
        if not trigger.workload:
            return body
        context = {
            **tick_context(schedule, trigger, now, manual=False),
            "message": {
                "body": body,
                "subject": message.subject,
                "key": message.key,
                "sequence": message.sequence,
            },
        }
        rendered = self._renderer.render(dict(trigger.workload), context, field="workload")
        if not isinstance(rendered, dict):  # a map renders to a map
            raise ValueError("the trigger's workload did not render to a map")
        return rendered

    def _record(
        self,
        name: str,
        message: Message,
        status: TickStatus,
        execution_id: str | None,
        error: str | None = None,
    ) -> None:
        """A tick row for the message's outcome, at its publication time (shown by
        `noetl schedule list` and the API like any tick)."""
        tick_ms = round(message.published * 1000)
        for offset in range(RECORD_TRIES):
            record = TickRecord(
                name, tick_ms + offset, status, execution_id, self.owner, error=error
            )
            if self.orchestrator.store.schedules.claim_tick(record):
                break
        self._decided(name, message, status.value, execution_id, error=error)

    def _decided(
        self, name: str, message: Message, outcome: str, execution_id: str | None, **fields: Any
    ) -> None:
        if self.metrics is not None:
            self.metrics.schedule_ticks.child(name, outcome).inc()
        log_event(
            log,
            logging.WARNING if outcome == "failed" else logging.INFO,
            "schedule_tick",
            schedule=name,
            outcome=outcome,
            message=message.key,
            delivered=message.delivered,
            execution_id=execution_id,
            owner=self.owner,
            **fields,
        )
