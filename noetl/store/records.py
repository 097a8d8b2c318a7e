"""The store's values: records, inputs, leases, the changes of a commit, its errors.

Frozen dataclasses shared by every adapter and every role port (`noetl.store.ports`).
The store's errors are defined in `noetl.core.errors` (every layer handles them) and
re-exported by `noetl.store.base` as part of the store's surface.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from noetl.core import Event, ExecutionStatus, Task

# The time source of an embedded store (memory, SQLite): epoch seconds, `time.time` unless
# a test injects a fake one to expire leases without sleeping. PostgreSQL keeps the
# database clock (`now()`): its servers and workers run on several machines.
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class ExecutionRecord:
    """One row of `execution`: what ran, its status and timestamps (epoch seconds).

    The workload is not here: it is stored once, in the execution's `workflow.started`
    event (`noetl.decision.workloads.stored_workload` reads it back)."""

    execution_id: str
    playbook_name: str
    playbook_path: str | None
    playbook_text: str
    status: ExecutionStatus = ExecutionStatus.RUNNING
    created_at: float = 0.0
    updated_at: float = 0.0
    finished_at: float | None = None
    parent_execution_id: str | None = None
    last_seq: int = 0
    context: dict[str, Any] = field(default_factory=dict)
    # Set when retention deleted its history (`Store.prune`): the row is a tombstone.
    pruned_at: float | None = None


@dataclass(frozen=True, slots=True)
class Append:
    """Events for one execution plus the projection changes they cause.

    `expected_seq` is the sequence number of the last event already stored (0 for none);
    `events` must continue it without gaps. `steps` maps step name -> its status dict
    (replacing the stored one); `context` replaces the stored context when given.
    """

    execution_id: str
    expected_seq: int
    events: Sequence[Event]
    status: ExecutionStatus | None = None
    steps: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    context: dict[str, Any] | None = None
    now: float = 0.0
    # Queue changes made in the same transaction as the events (distributed mode):
    enqueue: Sequence[Enqueue] = ()
    requeue: Sequence[Requeue] = ()
    cancel_tasks: Sequence[str] = ()
    inputs_done: Sequence[int] = ()
    # Timers: inputs delivered to this execution once their delay has passed.
    timers: Sequence[Timer] = ()
    # Dead-letter entries written (or written again: a replayed task failed once more)
    # with the decision, and entries whose status changes (a refused replay: pending).
    dead_letters: Sequence[DeadLetter] = ()
    dead_letter_status: Mapping[str, DeadLetterStatus] = field(default_factory=dict)


class TaskStatus(StrEnum):
    """Lifecycle of a `task_queue` row."""

    QUEUED = "queued"  # waiting for a worker (from not_before on)
    LEASED = "leased"  # a worker holds it until lease_expires_at
    DONE = "done"  # a worker reported an outcome with the current token
    EXPIRED = "expired"  # the lease ran out; the server decides what happens next
    CANCELED = "canceled"  # canceled before a worker took it


@dataclass(frozen=True, slots=True)
class Enqueue:
    """A new task row. `delay_s` sets not_before = database now + delay."""

    task: Task
    pool: str = "default"
    priority: int = 0
    delay_s: float = 0.0
    # A hint for the worker that runs it: when dispatched, it was the only task in flight
    # of its execution (so its worker may well decide what follows; see Lease.solo).
    solo: bool = False


@dataclass(frozen=True, slots=True)
class Requeue:
    """Put an existing task back in the queue for another attempt (same task id). A task
    that must change (a replay from the dead-letter queue) is enqueued again instead:
    enqueueing an existing id puts its row back in the queue with the new task."""

    task_id: str
    attempt: int
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Timer:
    """An input (`InputKind.TIMER`, `payload`) for the execution, due after `delay_s`."""

    delay_s: float
    payload: dict[str, Any]


class DeadLetterStatus(StrEnum):
    PENDING = "pending"  # waiting for an operator
    REPLAYED = "replayed"  # moved back to the queue (with its original message id)
    DISCARDED = "discarded"  # given up, with a reason


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A task that failed for good (seed 000, 8.6): one row of `dlq`, keyed by the task's
    ORIGINAL id (`message_id`), so a replay keeps every correlation.

    `payload` (the task's kind, spec, args, key...) and `context_excerpt` (the end of its
    template context) are redacted for people to read; `task` is the task as it was
    dispatched (secret references, never their values), for the replay only."""

    message_id: str
    execution_id: str
    step: str
    loop_index: int | None
    loop_key: Any
    tool_kind: str | None
    sink_id: str | None
    attempts: int
    reason: str
    error_type: str | None
    last_error: str
    last_stack: str | None
    payload: dict[str, Any]
    context_excerpt: str
    task: dict[str, Any]
    first_seen: float
    last_seen: float
    status: DeadLetterStatus = DeadLetterStatus.PENDING
    replays: int = 0
    discard_reason: str | None = None

    def summary(self) -> dict[str, Any]:
        """What a list shows: everything but the payload, the excerpt and the task."""
        return {
            "message_id": self.message_id,
            "execution_id": self.execution_id,
            "step": self.step,
            "loop_index": self.loop_index,
            "loop_key": self.loop_key,
            "tool_kind": self.tool_kind,
            "sink_id": self.sink_id,
            "attempts": self.attempts,
            "reason": self.reason,
            "error_type": self.error_type,
            "last_error": self.last_error,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "status": self.status.value,
            "replays": self.replays,
            "discard_reason": self.discard_reason,
        }

    def to_dict(self) -> dict[str, Any]:
        """What `show` prints: the summary, the stack, the redacted payload and excerpt
        (never `task`)."""
        return {
            **self.summary(),
            "last_stack": self.last_stack,
            "payload": self.payload,
            "context_excerpt": self.context_excerpt,
        }


@dataclass(frozen=True, slots=True)
class Lease:
    """A claimed task. `token` is the fencing token: it grows with every claim of the task,
    and only the current holder's heartbeat and result are accepted."""

    task: Task
    token: int
    expires_at: float
    worker_id: str
    solo: bool = False  # the Enqueue's hint
    # When the task became due (its `not_before`, database clock), so the time it waited
    # in the queue is `expires_at - lease_s - ready_at`; None where the adapter cannot say.
    ready_at: float | None = None

    def queued_s(self, lease_s: float) -> float | None:
        """How long the task waited between becoming due and being claimed (database
        clock: the claim time is the lease's expiry less its length); None: unknown."""
        return None if self.ready_at is None else self.expires_at - lease_s - self.ready_at


@dataclass(frozen=True, slots=True)
class NewExecution:
    """An execution to create (`Store.create_executions`): its row, its first append, its
    compiled playbook and the catalog version it must still be the latest of, as
    `create_execution` takes them."""

    record: ExecutionRecord
    initial: Append | None = None
    compiled: str | None = None
    latest: int | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """A task's outcome decided by the worker that ran it (`Store.continue_many`): the
    task's lease (`task_id`, `token`), the `append` that follows it, and the tasks of that
    append to lease to the worker at once (`lease`)."""

    task_id: str
    token: int
    append: Append
    lease: Sequence[str] = ()


# What `Store.continue_many` did with one completion: its leases, None when the task's
# token was no longer current, or the error that refused it (ConcurrencyError when its
# append was stale); nothing of a refused completion was written.
Completed = list[Lease] | None | Exception


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Answer to a heartbeat: `alive` False means the lease is lost (stop, do not report);
    `cancel` True means the execution asked this task to stop."""

    alive: bool
    cancel: bool = False


class InputKind(StrEnum):
    OUTCOME = "outcome"  # a worker's result (payload: Outcome.to_payload())
    CANCEL = "cancel"  # cancel the execution (payload: {"by": ...})
    LEASE_EXPIRED = "lease_expired"  # payload: {"task_id", "attempt", "worker_id"}
    REPLAY = "replay"  # replay a dead letter (payload: {"message_id", "task", "by", ...})
    FORCE_COMPLETE = "force_complete"  # payload: {"step", "status", "result", "reason", "by"}
    TIMER = "timer"  # a timer came due (payload: the engine's StartTimer payload)


@dataclass(frozen=True, slots=True)
class Input:
    """Something for the orchestrator to decide on, waiting in the `inbox` table."""

    id: int
    execution_id: str
    kind: InputKind
    payload: dict[str, Any]
    created_at: float


@dataclass(frozen=True, slots=True)
class PlaybookRecord:
    """A registered playbook version."""

    path: str
    version: int
    name: str
    text: str
    created_at: float


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    worker_id: str
    pool: str
    hostname: str
    pid: int
    status: str  # running | draining | stopped
    started_at: float
    heartbeat_at: float


@dataclass(frozen=True, slots=True)
class StoredResult:
    """A whole result kept in the result store (`store.results`) under `ref`."""

    ref: str
    execution_id: str
    step: str | None
    bytes: int  # the size of its JSON text
    value: Any
    created_at: float | None = None  # None on the record `put` returns


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The progress of a task that runs in parts (`store.checkpoints`), kept between its
    attempts: one per task id, the latest one kept."""

    task_id: str
    execution_id: str
    attempt: int  # the attempt of the task that wrote it
    value: Any  # JSON-able
    updated_at: float = 0.0  # epoch seconds


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What the metrics exporter reads from the store when scraped (epoch seconds).

    `running`: running executions by playbook name, with the oldest `updated_at` among
    them (when the least recently progressed one last committed). `parked`: parked steps
    of running executions by playbook name. `tasks`: queued and leased tasks by (pool,
    status), with, for queued tasks, the oldest `not_before` among the due ones (None if
    none is due). `inputs`: inbox rows, and the oldest one's `created_at`. `executions`:
    every execution by (playbook name, status), whoever committed its start or its end (a
    server, a worker's continuation, another server)."""

    running: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    parked: Mapping[str, int] = field(default_factory=dict)
    tasks: Mapping[tuple[str, str], tuple[int, float | None]] = field(default_factory=dict)
    inputs: tuple[int, float | None] = (0, None)
    executions: Mapping[tuple[str, str], int] = field(default_factory=dict)


# `Store.load_executions`: executions read at once at most, and the longest log it reads
# (a longer one is left to `load_execution`, whose PostgreSQL statement reads 1,000 events
# as one JSON text at most).
LOAD_MANY = 256
LOAD_MANY_EVENTS = 1000


def check_load_many(execution_ids: Collection[str], max_events: int) -> list[str]:
    """The distinct ids of a `load_executions` call, sorted; ValueError past its bounds."""
    ids = sorted(set(execution_ids))
    if len(ids) > LOAD_MANY:
        raise ValueError(f"load_executions reads {LOAD_MANY} executions at most, got {len(ids)}")
    if not 0 <= max_events <= LOAD_MANY_EVENTS:
        raise ValueError(f"max_events must be 0 to {LOAD_MANY_EVENTS}, got {max_events}")
    return ids


# The tables a prune deletes from, in the order it deletes (`PruneReport.rows`).
PRUNED_TABLES = (
    "task_queue",
    "inbox",
    "execution_input",
    "event_log",
    "step_state",
    "result_store",
    "task_checkpoint",
    "dlq",
)


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What a prune did (or, with `dry_run`, would do): how many executions it made
    tombstones of, and the rows it deleted per table (every table of PRUNED_TABLES, 0
    included). `skipped`: another process was pruning the same database (PostgreSQL's
    advisory lock), so this one did nothing. `batches`: transactions committed."""

    executions: int = 0
    rows: Mapping[str, int] = field(default_factory=dict)
    dry_run: bool = False
    skipped: bool = False
    batches: int = 0

    @property
    def total(self) -> int:
        """Rows deleted (or that would be) in every table."""
        return sum(self.rows.values())


@dataclass(frozen=True, slots=True)
class PartitionReport:
    """What a pass over the partitions of `event_log` and `step_state` did (PostgreSQL;
    the other stores have none): the partitions it made and the ones it dropped."""

    made: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()

    @staticmethod
    def check(period_days: int, ahead_days: int) -> None:
        """ValueError unless a pass's arguments make sense (a period of a day or more)."""
        if period_days < 1 or ahead_days < 0:
            raise ValueError(
                f"period_days must be >= 1 and ahead_days >= 0, got {period_days}, {ahead_days}"
            )


class TickStatus(StrEnum):
    """Where a claimed tick of a schedule stands (`schedule_tick.status`)."""

    PENDING = "pending"  # claimed, its execution id chosen; the execution not started yet
    STARTED = "started"  # its execution exists
    BUFFERED = "buffered"  # waits for the schedule's running execution to end (buffer_one)
    SKIPPED = "skipped"  # the previous execution still ran (skip, or a buffer already full)
    FAILED = "failed"  # could not start (the playbook is gone or invalid): see `error`


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """One schedule: the playbook it starts (a catalog path) and its trigger (`spec`, the
    `triggers:` entry as a JSON-able map). `source` is `api` or `playbook` (made from a
    registered playbook's `triggers:` block). Times are epoch seconds; a schedule's ticks
    start after its creation."""

    name: str
    playbook_path: str
    spec: dict[str, Any]
    source: str = "api"
    paused: bool = False
    created_at: float = 0.0
    updated_at: float = 0.0
    token_hash: str | None = None  # SHA-256 of its webhook's token; None: no webhook
    token_sealed: str | None = None  # the token, encrypted (`<key id>:<Fernet token>`)


@dataclass(frozen=True, slots=True)
class TickRecord:
    """One decided tick of a schedule; (`schedule`, `tick_ms`) is claimed once. A manual
    tick (run-now) is not a tick of the schedule's time table."""

    schedule: str
    tick_ms: int
    status: TickStatus
    execution_id: str | None
    owner: str
    manual: bool = False
    error: str | None = None
    claimed_at: float = 0.0
    updated_at: float = 0.0

    @property
    def tick(self) -> float:
        """The tick's time, epoch seconds."""
        return self.tick_ms / 1000
