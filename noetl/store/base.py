"""The Store port: what the runtime needs from persistence, independent of the database.

Every adapter (memory, SQLite, PostgreSQL) passes the same contract suite
(`tests/contract`). Writes for one decision happen in one transaction: events are appended
with an expected sequence number (optimistic concurrency; the per-execution sequence stays
gapless), and the projections (execution row, step states) are updated together.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from noetl.engine.types import Event, ExecutionStatus, Task
from noetl.errors import NoetlError

if TYPE_CHECKING:
    from noetl.auth import TokenStore
    from noetl.auth.sessions import SessionStore
    from noetl.credentials.store import CredentialStore

# The time source of an embedded store (memory, SQLite): epoch seconds, `time.time` unless
# a test injects a fake one to expire leases without sleeping. PostgreSQL keeps the
# database clock (`now()`): its servers and workers run on several machines.
Clock = Callable[[], float]


class ConcurrencyError(NoetlError):
    """Another writer appended to the execution first (expected sequence did not match),
    or another commit consumed an input this one decided on.

    `execution_ids` names the executions whose append was refused (every one of a commit,
    where the adapter can tell), so a batch can be committed again without them;
    `input_ids` the inputs another commit consumed already: they were decided elsewhere
    and must not be decided again."""

    def __init__(
        self, message: str, execution_ids: Sequence[str] = (), input_ids: Sequence[int] = ()
    ) -> None:
        super().__init__(message)
        self.execution_ids = tuple(execution_ids)
        self.input_ids = tuple(input_ids)


class NotFoundError(NoetlError):
    """No such execution."""


class StoreUnavailableError(NoetlError):
    """The database cannot be opened or used (missing directory, no permission, locked).

    The message names the database and what to do about it. A locked or busy database is
    transient (`retryable`); a path that cannot be opened is not.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


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


class InputHolder(Protocol):
    """An orchestrator's standing as a holder of inbox inputs (`Store.open_holder`).

    The inputs it claims with its `token` are its own until their hold expires, or until
    it is gone: then any orchestrator's `release_orphaned_inputs` frees them at once."""

    @property
    def token(self) -> str:
        """The owner to give `claim_inputs`; no other holder ever has it (a process that
        restarts with the same owner name gets a new one)."""

    def alive(self) -> bool:
        """False once this holder is known gone (closed; PostgreSQL: its session ended).
        A gone holder's token must not claim again: open a new holder."""

    def close(self) -> None:
        """Stop holding: what it holds is freed by the next `release_orphaned_inputs`."""


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


class Store(Protocol):
    """Persistence of executions and their event logs."""

    @property
    def tokens(self) -> TokenStore:
        """The API tokens (noetl.auth), in the same database."""

    @property
    def sessions(self) -> SessionStore:
        """The database session store (noetl.sessions), in the same database."""

    @property
    def credentials(self) -> CredentialStore:
        """Encrypted named credentials (noetl.credentials), in the same database."""

    def create_execution(
        self, record: ExecutionRecord, initial: Append | None = None, *, compiled: str | None = None
    ) -> None:
        """Insert a new execution row as given (`record.last_seq` must be 0) and, when
        given, apply `initial` (its first events, tasks...) in the SAME transaction, so an
        execution never exists without its start. `compiled` (the validated playbook as
        JSON) is kept for `get_compiled`.

        ConcurrencyError if an execution with that id already exists."""

    def get_compiled(self, execution_id: str) -> str | None:
        """The `compiled` playbook given at creation, or None (none given, or no such
        execution)."""

    def commit(self, appends: Sequence[Append]) -> None:
        """Apply every append in ONE transaction; ConcurrencyError (and nothing written)
        if any expected_seq does not match the stored last sequence, NotFoundError if an
        execution does not exist, ValueError if events do not continue expected_seq
        gaplessly. A given status sets `finished_at` to `now` when terminal, else clears it.

        Inputs are consumed once: an append WITH events whose `inputs_done` names an input
        that is no longer in the inbox (another commit consumed it: the same input was
        decided twice) is refused too, ConcurrencyError naming it in `input_ids`. An append
        without events may name inputs already gone (a retried commit, dropped inputs).
        """

    def load_events(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events of an execution in sequence order, after `after_seq`; NotFoundError if
        the execution does not exist."""

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """The execution row, or None."""

    def execution_family(self, execution_id: str) -> list[str]:
        """The execution and its descendants (children started by its `playbook` steps,
        their children, ...): the ids, the execution's first; [] when it does not exist."""

    def list_executions(
        self, *, status: ExecutionStatus | None = None, limit: int = 50, offset: int = 0
    ) -> list[ExecutionRecord]:
        """Newest first (by created_at, then by insertion)."""

    def get_steps(self, execution_id: str) -> dict[str, dict[str, Any]]:
        """The step_state projection: step name -> status dict; NotFoundError if the
        execution does not exist."""

    # --- the task queue (distributed mode) ---------------------------------------------

    def claim(
        self,
        worker_id: str,
        *,
        pool: str = "default",
        limit: int = 1,
        lease_s: float = 30.0,
        executions: Collection[str] | None = None,
    ) -> list[Lease]:
        """Lease up to `limit` queued tasks of `pool` whose not_before has passed, highest
        priority first, then oldest; the expiry is computed by the database clock. Safe
        under concurrency: a task is leased by one worker at a time. With `executions`,
        only tasks of those executions (a command working for one execution on a shared
        database never takes another's)."""

    def heartbeat(self, task_id: str, token: int, *, lease_s: float = 30.0) -> Heartbeat:
        """Extend a lease; a stale token (or a task no longer leased) changes nothing."""

    def complete(self, task_id: str, token: int, outcome: dict[str, Any]) -> bool:
        """Record a worker's outcome: with the current token of a leased task, mark it done
        and add an OUTCOME input, atomically, and return True; otherwise change nothing
        and return False (a late or duplicate result)."""

    def complete_many(self, reports: Sequence[tuple[str, int, dict[str, Any]]]) -> set[str]:
        """`complete` for several (task_id, token, outcome) reports in one round trip: each
        is accepted or refused on its own, as `complete` would; returns the accepted ids."""

    def complete_and_commit(
        self,
        task_id: str,
        token: int,
        append: Append,
        *,
        worker_id: str,
        lease: Sequence[str] = (),
        lease_s: float = 30.0,
    ) -> list[Lease] | None:
        """A worker's outcome, decided where it ran: with the current token of a leased
        task, in ONE transaction mark the task done (no inbox input), apply `append` as
        `commit` does, and lease the tasks named in `lease` (queued by `append`) to
        `worker_id` at once, without waking other workers for them. Returns those leases.

        None (nothing written) when the token is not current; ConcurrencyError (nothing
        written, the task still leased) when `append.expected_seq` is stale."""

    def release(self, held: Sequence[tuple[str, int]]) -> set[str]:
        """Hand leased tasks back to the queue at once (a worker that stops without
        finishing them): each (task_id, token) whose lease is current is queued again in
        its old place (it was due already), with no holder, its attempt and fencing token
        as they were (so the next claim raises the token, and the old holder's heartbeats
        and results are refused);
        one whose execution asked it to stop is canceled instead. A stale token changes
        nothing. Returns the ids handed back (or canceled); wakes the workers."""

    def maintain(self) -> None:
        """Housekeeping of the queue tables, cheap enough to call every few seconds
        (PostgreSQL: vacuum the queue and the inbox, whose rows are rewritten at a high
        rate, so claims stay as fast as on a fresh table). A no-op where not needed."""

    def reap_expired(self, *, limit: int = 100, executions: Collection[str] | None = None) -> int:
        """Mark leased tasks whose lease ran out (database clock) as expired and add a
        LEASE_EXPIRED input for each (with `executions`: only theirs); returns how many."""

    def get_task(self, task_id: str) -> dict[str, Any] | None:
        """A task_queue row as a dict (status, attempt, lease_token, worker_id, ...)."""

    # --- the inbox --------------------------------------------------------------------

    def post_input(self, execution_id: str, kind: InputKind, payload: dict[str, Any]) -> int:
        """Add an input for the orchestrator; returns its id."""

    def claim_inputs(
        self,
        owner: str,
        *,
        limit: int = 500,
        lease_s: float = 30.0,
        executions: Collection[str] | None = None,
    ) -> list[Input]:
        """Take up to `limit` inputs nobody holds (or whose hold expired), oldest first,
        holding them for `lease_s` (with `executions`: only theirs). Inputs are deleted by
        a commit's `inputs_done`.
        `owner` is a holder's token (`open_holder`; PostgreSQL then claims on the holder's
        own session, so a holder whose session ended cannot claim), or any other name,
        whose holds only expire."""

    def open_holder(self, owner: str) -> InputHolder:
        """Become a holder of inbox inputs, named `owner` for people (`host:pid`), for as
        long as this process lives (PostgreSQL: as long as the holder's own session does;
        it is closed by `close` or by `Store.close`)."""

    def release_orphaned_inputs(self) -> int:
        """Free the inputs still held by holders that are gone, so any orchestrator can
        claim them at once instead of waiting for their hold to expire; returns how many.

        Gone means closed, or (PostgreSQL) its session ended: the process died, its
        connection was lost, the database restarted; (SQLite) its process on this machine
        ended. A holder that is alive but slow keeps its inputs until the hold expires;
        and should one be taken from a holder still deciding them (its session was lost),
        `commit` refuses the second decision of any of them."""

    # --- the dead-letter queue ---------------------------------------------------------

    def list_dead_letters(
        self,
        *,
        status: DeadLetterStatus | None = None,
        execution_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[DeadLetter]:
        """Entries, most recently failed first (by last_seen, then message id)."""

    def get_dead_letter(self, message_id: str) -> DeadLetter | None: ...

    def dead_letter_counts(self) -> dict[str, int]:
        """How many entries there are of each status (every status listed, 0 included)."""

    def post_replay(self, message_id: str, payload: dict[str, Any]) -> bool:
        """Replay a PENDING entry: in ONE transaction mark it replayed (replays + 1) and
        post a REPLAY input with `payload` for its execution. False (nothing written) when
        the entry is not pending: replaying twice replays once. NotFoundError when there
        is no such entry."""

    def discard_dead_letter(self, message_id: str, reason: str) -> bool:
        """Mark a PENDING entry discarded with `reason`; False when it is not pending,
        NotFoundError when there is no such entry."""

    def wait_for(self, channel: str, timeout: float) -> bool:
        """Block until something is posted on `channel` ("tasks" or "inputs") or the
        timeout passes; True if woken. Adapters without notifications just sleep."""

    # --- playbooks and workers --------------------------------------------------------

    def register_playbook(self, path: str, name: str, text: str, now: float) -> PlaybookRecord:
        """Store a new version of the playbook at `path` (1, 2, ...); the same text as
        the latest version returns that version instead of adding one."""

    def get_playbook(self, path: str, version: int | None = None) -> PlaybookRecord | None:
        """A version of a registered playbook (the latest when `version` is None)."""

    def list_playbooks(self) -> list[PlaybookRecord]:
        """The latest version of every registered playbook, by path."""

    def register_worker(self, record: WorkerRecord) -> None: ...

    def worker_heartbeat(self, worker_id: str) -> str:
        """Record that the worker is alive; returns its status (`draining` asks it to
        stop taking tasks)."""

    def request_drain(self, pool: str | None = None) -> int:
        """Ask running workers (of one pool, or all) to drain; returns how many."""

    def list_workers(self) -> list[WorkerRecord]: ...

    def stats(self) -> StoreStats:
        """Counts for the metrics exporter (a few grouped queries; called per scrape)."""

    def close(self) -> None: ...
