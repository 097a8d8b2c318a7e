"""The scheduler loop: starts the executions of schedules, each tick exactly once.

Any number of schedulers (one per `noetl server start` or `noetl ui`) may run against one
database. Each looks at every schedule about once a second, computes the ticks due since
the schedule's last claimed tick (`noetl.core.ticks.due_ticks`: on-time ticks, and the
missed ones its catch-up policy keeps) and claims each in `schedule_tick`:

* The claim is one INSERT keyed by (schedule, tick): of two servers claiming one tick at
  once, one row gets in; the other server moves on. So a tick is decided once.
* The claim records the tick's outcome (decided from the overlap policy and the
  schedule's running executions) and, for a tick that runs, the execution id chosen
  BEFORE the execution is created. The claimer then creates it with that id. If it dies
  in between, the tick stays `pending` and any scheduler starts it after
  `recover_after_s` with the same id; an execution id exists once, so a second start
  (the claimer was slow, not dead) fails with ConcurrencyError and changes nothing.
* A `buffered` tick (buffer_one, cancel_other) starts once the schedule has no running
  execution: moved to `pending` by one scheduler (a conditional update), then started.

The decision of each tick is logged (`schedule_tick`) and counted
(`noetl_schedule_ticks_total{schedule,outcome}`); the start's lateness is the gauge
`noetl_schedule_tick_lag_seconds`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from noetl.core import ConcurrencyError, NotFoundError, StoreUnavailableError
from noetl.core.ticks import Overlap, due_ticks, next_ticks, zone
from noetl.decision.records import new_execution_id
from noetl.dsl.render import Renderer
from noetl.dsl.triggers import Trigger, trigger_spec
from noetl.errors import NoetlError
from noetl.observability.logging import log_event
from noetl.observability.metrics import Metrics
from noetl.runtime.orchestrator import Orchestrator
from noetl.store.base import ScheduleRecord, Store, TickRecord, TickStatus

log = logging.getLogger("noetl.scheduler")
Clock = Callable[[], float]
# How many recent ticks of a schedule are looked at for executions still running.
RECENT = 20


class EventSources(Protocol):
    """Schedules started by events rather than a time table (`nats:` triggers): told at
    each turn which schedules there are, so they consume what those name."""

    def sync(self, schedules: Iterable[tuple[ScheduleRecord, Trigger]]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    """`grace`: how late a tick may be and still count as on time (later ones are missed
    and fire only by the catch-up policy); `poll_s`: how often schedules are looked at;
    `recover_after_s`: how long a claimed tick may stay unstarted before another
    scheduler starts it."""

    grace: float = 5.0
    poll_s: float = 1.0
    recover_after_s: float = 10.0


def tick_context(
    schedule: ScheduleRecord, trigger: Trigger, tick: float, *, manual: bool
) -> dict[str, Any]:
    """What a schedule's workload templates see: `tick` (its time in the schedule's zone,
    ISO 8601, its date, epoch seconds, whether run by hand) and `schedule` (name, path)."""
    moment = datetime.fromtimestamp(tick, zone(trigger.timezone))
    return {
        "tick": {
            "time": moment.isoformat(),
            "date": moment.date().isoformat(),
            "epoch": tick,
            "manual": manual,
        },
        "schedule": {"name": schedule.name, "playbook": schedule.playbook_path},
    }


class Scheduler:
    """Claims and starts the ticks of every schedule in `store` (see the module)."""

    def __init__(
        self,
        store: Store,
        orchestrator: Orchestrator,
        *,
        owner: str,
        clock: Clock = time.time,
        options: SchedulerOptions | None = None,
        metrics: Metrics | None = None,
        events: EventSources | None = None,
    ) -> None:
        self.store = store
        self.events = events
        self.orchestrator = orchestrator
        self.owner = owner
        self.clock = clock
        self.options = options or SchedulerOptions()
        self.metrics = metrics
        self._renderer = Renderer()
        self._triggers: dict[str, Trigger] = {}
        self._next_due: float | None = None  # the earliest next tick of any schedule

    # --- the loop ------------------------------------------------------------------------

    def serve(self, should_stop: Callable[[], bool]) -> None:
        """Run `run_once` every `poll_s` until `should_stop()`; a failed turn (the
        database away) is logged and tried again at the next one."""
        try:
            self._serve(should_stop)
        finally:
            if self.events is not None:
                self.events.close()

    def _serve(self, should_stop: Callable[[], bool]) -> None:
        while not should_stop():
            try:
                self.run_once()
            except Exception:
                log.exception("scheduler turn failed; trying again")
            # Woken at the next tick when it comes before the next poll, so a tick starts
            # on time rather than up to a poll late.
            wait = self.options.poll_s
            if self._next_due is not None:
                wait = min(wait, max(0.0, self._next_due - self.clock()) + 0.005)
            deadline = time.monotonic() + wait
            while not should_stop() and time.monotonic() < deadline:
                time.sleep(min(0.1, wait))

    def run_once(self) -> int:
        """Look at every schedule once: claim and start its due ticks, start buffered
        ticks whose turn came, recover ticks left pending. Returns how many ticks this
        scheduler claimed."""
        claimed = 0
        self._next_due = None
        schedules = self.store.schedules.all()
        for schedule in schedules:
            if not schedule.paused:
                claimed += self._look_at(schedule)
        if self.events is not None:
            self.events.sync(self._parsed(schedules))
        self._start_buffered()
        self._recover_pending()
        return claimed

    def trigger(self, schedule: ScheduleRecord) -> Trigger:
        """The schedule's trigger (parsed once per spec)."""
        key = json.dumps(schedule.spec, sort_keys=True, default=str)
        found = self._triggers.get(key)
        if found is None:
            found = Trigger.model_validate(schedule.spec)
            self._triggers[key] = found
        return found

    def _parsed(self, schedules: list[ScheduleRecord]) -> list[tuple[ScheduleRecord, Trigger]]:
        found = []
        for schedule in schedules:
            try:
                found.append((schedule, self.trigger(schedule)))
            except ValueError:
                continue  # logged by _look_at
        return found

    def _look_at(self, schedule: ScheduleRecord) -> int:
        try:
            trigger = self.trigger(schedule)
        except ValueError as exc:
            log.warning("schedule %s has an invalid trigger: %s", schedule.name, exc)
            return 0
        last = self.store.schedules.last_tick(schedule.name)
        cursor = schedule.created_at if last is None else max(last.tick, schedule.created_at)
        now = self.clock()
        spec = trigger_spec(trigger)
        if spec is None:
            return 0  # a webhook or a NATS subject: started by its requests or messages
        due = due_ticks(spec, cursor, now, grace=self.options.grace)
        upcoming = next_ticks(spec, now, 1)
        if upcoming and (self._next_due is None or upcoming[0] < self._next_due):
            self._next_due = upcoming[0]
        claimed = 0
        for index, tick in enumerate(due.fire):
            if self._claim(schedule, trigger, tick, dropped=due.dropped if index == 0 else 0):
                claimed += 1
        return claimed

    # --- one tick ------------------------------------------------------------------------

    def _claim(
        self, schedule: ScheduleRecord, trigger: Trigger, tick: float, *, dropped: int
    ) -> bool:
        running = self._running(schedule.name)
        status = self._outcome(schedule.name, trigger.overlap, running)
        runs = status in (TickStatus.PENDING, TickStatus.BUFFERED)
        record = TickRecord(
            schedule.name,
            round(tick * 1000),
            status,
            new_execution_id(self.clock()) if runs else None,
            self.owner,
        )
        if not self.store.schedules.claim_tick(record):
            return False  # another scheduler decided this tick
        if dropped:
            self._count(schedule.name, "missed", dropped)
        if trigger.overlap is Overlap.CANCEL_OTHER:
            for execution_id in running:
                self.orchestrator.cancel(execution_id, by=f"schedule:{schedule.name}")
        if status is TickStatus.PENDING:
            self._start(schedule, trigger, record)
        else:
            self._decided(schedule.name, record, status.value)
        return True

    def _outcome(self, name: str, overlap: Overlap, running: list[str]) -> TickStatus:
        if not running or overlap is Overlap.ALLOW:
            return TickStatus.PENDING
        if overlap is Overlap.SKIP:
            return TickStatus.SKIPPED
        waiting = [
            t
            for t in self.store.schedules.ticks(name, limit=RECENT)
            if t.status is TickStatus.BUFFERED
        ]
        if overlap is Overlap.CANCEL_OTHER:
            # the newest tick replaces one still waiting for the cancel to finish
            for old in waiting:
                if self.store.schedules.move_tick(
                    name, old.tick_ms, TickStatus.SKIPPED, expect=TickStatus.BUFFERED
                ):
                    self._decided(name, old, "skipped")
            return TickStatus.BUFFERED
        return TickStatus.SKIPPED if waiting else TickStatus.BUFFERED

    def _running(self, name: str) -> list[str]:
        """Executions of the schedule's recent ticks that have not finished."""
        found: list[str] = []
        for tick in self.store.schedules.ticks(name, limit=RECENT):
            if tick.status is not TickStatus.STARTED or tick.execution_id is None:
                continue
            record = self.store.get_execution(tick.execution_id)
            if record is not None and not record.status.terminal:
                found.append(tick.execution_id)
        return found

    def _start(self, schedule: ScheduleRecord, trigger: Trigger, tick: TickRecord) -> str | None:
        """Create the tick's execution with its recorded id, then mark the tick started;
        a playbook that is gone or invalid fails the tick (recorded, not retried)."""
        assert tick.execution_id is not None
        try:
            playbook = self.store.get_playbook(schedule.playbook_path)
            if playbook is None:
                raise LookupError(f"playbook {schedule.playbook_path!r} is not registered")
            context = tick_context(schedule, trigger, tick.tick, manual=tick.manual)
            workload = self._renderer.render(dict(trigger.workload), context, field="workload")
            self.orchestrator.start_execution(
                playbook.text,
                path=playbook.path,
                workload=workload,
                execution_id=tick.execution_id,
            )
        except StoreUnavailableError:
            raise  # the tick stays pending: started at a later turn
        except ConcurrencyError:
            pass  # started already, by a scheduler that recovered the tick, or by us
        except (LookupError, NoetlError, ValueError) as exc:
            if self.store.schedules.move_tick(
                schedule.name,
                tick.tick_ms,
                TickStatus.FAILED,
                expect=TickStatus.PENDING,
                error=str(exc),
            ):
                self._decided(schedule.name, tick, "failed", error=str(exc))
            return None
        if self.store.schedules.move_tick(
            schedule.name, tick.tick_ms, TickStatus.STARTED, expect=TickStatus.PENDING
        ):
            lag = max(0.0, self.clock() - tick.tick)
            if self.metrics is not None and not tick.manual:
                self.metrics.schedule_tick_lag.child(schedule.name).set(lag)
            self._decided(schedule.name, tick, "started", lag=round(lag, 3))
        return tick.execution_id

    def _start_buffered(self) -> None:
        for tick in self.store.schedules.ticks_with(TickStatus.BUFFERED):
            schedule = self.store.schedules.get(tick.schedule)
            if schedule is None or schedule.paused or self._running(tick.schedule):
                continue
            if self.store.schedules.move_tick(
                tick.schedule, tick.tick_ms, TickStatus.PENDING, expect=TickStatus.BUFFERED
            ):
                self._start(schedule, self.trigger(schedule), tick)

    def _recover_pending(self) -> None:
        now = self.clock()
        for tick in self.store.schedules.ticks_with(TickStatus.PENDING):
            if now - tick.claimed_at < self.options.recover_after_s:
                continue
            schedule = self.store.schedules.get(tick.schedule)
            if schedule is not None:
                log.info(
                    "starting tick %s of %s left pending by %s",
                    tick.tick_ms,
                    tick.schedule,
                    tick.owner,
                )
                self._start(schedule, self.trigger(schedule), tick)

    # --- run now -------------------------------------------------------------------------

    def run_now(self, name: str) -> str | None:
        """Start the schedule's playbook at once, as a manual tick (whatever its overlap
        policy or pause); the execution id, or None when it failed to start (the tick's
        error says why). NotFoundError when there is no such schedule."""
        schedule = self.store.schedules.get(name)
        if schedule is None:
            raise NotFoundError(f"schedule {name!r} does not exist")
        now = self.clock()
        tick_ms = round(now * 1000)
        record = TickRecord(
            name, tick_ms, TickStatus.PENDING, new_execution_id(now), self.owner, manual=True
        )
        while not self.store.schedules.claim_tick(record):  # two run-nows in one millisecond
            record = TickRecord(
                name,
                record.tick_ms + 1,
                record.status,
                record.execution_id,
                self.owner,
                manual=True,
            )
        return self._start(schedule, self.trigger(schedule), record)

    # --- what is seen of it --------------------------------------------------------------

    def _decided(self, name: str, tick: TickRecord, outcome: str, **fields: Any) -> None:
        self._count(name, outcome, 1)
        log_event(
            log,
            logging.WARNING if outcome == "failed" else logging.INFO,
            "schedule_tick",
            schedule=name,
            tick=datetime.fromtimestamp(tick.tick).astimezone().isoformat(),
            outcome=outcome,
            manual=tick.manual or None,
            execution_id=tick.execution_id if outcome in ("started", "buffered") else None,
            owner=self.owner,
            **fields,
        )

    def _count(self, name: str, outcome: str, amount: int) -> None:
        if self.metrics is not None:
            self.metrics.schedule_ticks.child(name, outcome).inc(amount)
