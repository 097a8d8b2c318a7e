"""The store's ports: role protocols, and `Store`, their union.

A caller is typed against the role it plays: a worker against `LeasePort` (and
`WorkerRegistryPort`), the engine runtime against `ExecutionPort` and `InboxPort`, the
API's admin pages against `DeadLetterPort`, `CatalogPort` and `AdminPort`, retention
against `RetentionPort`. `Store` is every role at once: each adapter implements it, and
passes the contract suite as one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from noetl.core import Event, ExecutionStatus
from noetl.store.records import (
    Append,
    Checkpoint,
    Completed,
    Completion,
    DeadLetter,
    DeadLetterStatus,
    ExecutionRecord,
    Heartbeat,
    Input,
    InputKind,
    Lease,
    NewExecution,
    PartitionReport,
    PlaybookRecord,
    PruneReport,
    ScheduleRecord,
    StoredResult,
    StoreStats,
    TickRecord,
    TickStatus,
    WorkerRecord,
)

if TYPE_CHECKING:
    from noetl.auth import TokenStore
    from noetl.auth.sessions import SessionStore
    from noetl.credentials.store import CredentialStore


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


class ResultStore(Protocol):
    """Whole results kept outside the event log (`store.results`), by reference."""

    def put(self, execution_id: str, step: str | None, value: Any) -> StoredResult:
        """Keep `value` (JSON-able, already bounded and masked) under a new, unguessable
        reference (`noetl://results/...`)."""

    def get(self, ref: str) -> StoredResult | None:
        """The result kept under `ref`; None when there is none (or `ref` is not one)."""

    def count(self, execution_id: str) -> tuple[int, int]:
        """How many results `execution_id` keeps here, and their bytes."""


class CheckpointStore(Protocol):
    """Progress of a task that runs in parts, kept between its attempts (`store.checkpoints`)."""

    def save(self, task_id: str, execution_id: str, attempt: int, value: Any) -> bool:
        """Keep `value` as the checkpoint of `task_id`, replacing the one kept, unless the kept one
        was written by a LATER attempt (a stale worker never overwrites a newer attempt's progress):
        then nothing changes and it returns False. True when kept."""

    def load(self, task_id: str) -> Checkpoint | None:
        """The checkpoint of `task_id`, or None."""

    def drop(self, task_id: str) -> None:
        """Forget the checkpoint of `task_id` (no error when there is none)."""


class ScheduleStore(Protocol):
    """Schedules and their claimed ticks (`store.schedules`).

    A tick is started once however many servers look at it: `claim_tick` writes its row
    only when none has its key (schedule, tick), with the execution id chosen before the
    execution is created, so a tick left `pending` by a server that died is started by
    another with that same id (an execution id exists once)."""

    def put(self, record: ScheduleRecord) -> ScheduleRecord:
        """Create the schedule, or update its playbook, source and spec (keeping its
        creation time and paused state); returns it as stored."""

    def get(self, name: str) -> ScheduleRecord | None: ...
    def all(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""

    def set_paused(self, name: str, paused: bool) -> bool:
        """Pause or resume; False when there is no such schedule."""

    def delete(self, name: str) -> bool:
        """Forget the schedule, its ticks and deliveries; False when there is none."""

    def set_token(self, name: str, token_hash: str | None, *, sealed: str | None = None) -> bool:
        """Set (None: remove) the hash of the token of the schedule's webhook, and the
        token encrypted (`sealed`, to check HMAC signatures); False when there is no such
        schedule. `put` keeps them."""

    def claim_delivery(self, schedule: str, key: str, execution_id: str) -> tuple[str, bool]:
        """Claim a webhook delivery by its idempotency key for `execution_id`: (that id,
        True) for the first claim of the key, (the id the first claim recorded, False)
        for every repeat."""

    def claim_tick(self, tick: TickRecord) -> bool:
        """Write the tick's row unless one with its key exists: True for the one caller
        that wrote it, False for every other (nothing written)."""

    def last_tick(self, schedule: str, *, manual: bool = False) -> TickRecord | None:
        """The newest claimed tick of the time table (`manual`: the newest run-now)."""

    def ticks(self, schedule: str, *, limit: int = 20) -> list[TickRecord]:
        """The schedule's ticks, newest first."""

    def ticks_with(self, status: TickStatus, *, limit: int = 100) -> list[TickRecord]:
        """Ticks of every schedule in `status`, oldest first."""

    def move_tick(
        self,
        schedule: str,
        tick_ms: int,
        status: TickStatus,
        *,
        expect: TickStatus,
        error: str | None = None,
    ) -> bool:
        """Set the tick's status (and error) if it is still `expect`: of two callers
        moving one tick on, one does (True), the other changes nothing (False)."""


class WaitPort(Protocol):
    """Waking up on new work: what a polling loop blocks on."""

    def wait_for(self, channel: str, timeout: float) -> bool:
        """Block until something is posted on `channel` ("tasks" or "inputs") or the
        timeout passes; True if woken. Adapters without notifications just sleep."""


class LeasePort(WaitPort, Protocol):
    """What a worker needs to run tasks: claim, heartbeat, report, hand back."""

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

    def release(self, held: Sequence[tuple[str, int]]) -> set[str]:
        """Hand leased tasks back to the queue at once (a worker that stops without
        finishing them): each (task_id, token) whose lease is current is queued again in
        its old place (it was due already), with no holder, its attempt and fencing token
        as they were (so the next claim raises the token, and the old holder's heartbeats
        and results are refused);
        one whose execution asked it to stop is canceled instead. A stale token changes
        nothing. Returns the ids handed back (or canceled); wakes the workers."""


class WorkerRegistryPort(Protocol):
    """The worker table: registration, liveness, drain."""

    def register_worker(self, record: WorkerRecord) -> None: ...
    def worker_heartbeat(self, worker_id: str) -> str:
        """Record that the worker is alive; returns its status (`draining` asks it to
        stop taking tasks)."""

    def request_drain(self, pool: str | None = None) -> int:
        """Ask running workers (of one pool, or all) to drain; returns how many."""

    def list_workers(self) -> list[WorkerRecord]: ...


class ExecutionPort(Protocol):
    """The engine runtime's side: executions, their event logs and projections."""

    def create_execution(
        self,
        record: ExecutionRecord,
        initial: Append | None = None,
        *,
        compiled: str | None = None,
        latest: int | None = None,
    ) -> None:
        """Insert a new execution row as given (`record.last_seq` must be 0) and, when
        given, apply `initial` (its first events, tasks...) in the SAME transaction, so an
        execution never exists without its start. `compiled` (the validated playbook as
        JSON) is kept for `get_compiled`. `latest`: the version of the registered playbook
        at `record.playbook_path` that the start took for the latest (read from a cache);
        the start is refused if a newer version is registered.

        ConcurrencyError if an execution with that id already exists; StalePlaybookError
        if `latest` is not the latest version (nothing is written either way)."""

    def create_executions(self, items: Sequence[NewExecution]) -> list[Exception | None]:
        """`create_execution` for several executions (starts that arrive together), in ONE
        transaction when every one of them can be created; otherwise each on its own, so
        one refused start never holds back the others. In the order given, None for each
        one created, or the error that refused it (ConcurrencyError when its id exists,
        StalePlaybookError when its `latest` is not); nothing of a refused one is written."""

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

    def continue_many(
        self, items: Sequence[Completion], *, worker_id: str, lease_s: float = 30.0
    ) -> list[Completed]:
        """`complete_and_commit` for several tasks of different executions, in ONE
        transaction when every token is current and every append continues its execution
        (a worker's continuations that end together). Otherwise each is applied on its own
        as `complete_and_commit` would, so one stale completion never holds back the
        others. In the order given, what happened to each: its leases, None (its token was
        not current), or the error that refused it (ConcurrencyError when stale); nothing
        of a refused completion is written. Two completions of one execution are refused
        (ValueError): an execution's continuations chain one after another."""

    def load_events(
        self, execution_id: str, *, after_seq: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events of an execution in sequence order, after `after_seq`; NotFoundError if
        the execution does not exist."""

    def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        """The execution row, or None."""

    def load_execution(self, execution_id: str) -> tuple[ExecutionRecord, list[Event]] | None:
        """The execution row and its whole event log, read together (one statement on
        PostgreSQL); None when there is no such execution, or retention deleted its
        history (only its tombstone is left)."""

    def load_executions(
        self, execution_ids: Collection[str], *, max_events: int
    ) -> dict[str, tuple[ExecutionRecord, list[Event]]]:
        """`load_execution` of many young executions at once (one statement on
        PostgreSQL): those of `execution_ids` (at most `records.LOAD_MANY`) that exist, keep
        their history and hold at most `max_events` events (at most 1,000), by id. The
        others are left out: a caller reads them one by one."""

    def finished_among(self, execution_ids: Collection[str]) -> dict[str, ExecutionStatus]:
        """Those of `execution_ids` that have finished, with their status, in one read of
        the status column alone (ids that do not exist are left out)."""

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

    def queued_tasks(self, execution_id: str) -> dict[tuple[str, str], int]:
        """How many of the execution's tasks wait in the queue (status queued: not
        claimed by a worker, due or not), by (step, pool); {} when none (or no such
        execution)."""


class InboxPort(WaitPort, Protocol):
    """The orchestrator's side of the queue: inputs to decide on, and housekeeping."""

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

    def reap_expired(self, *, limit: int = 100, executions: Collection[str] | None = None) -> int:
        """Mark leased tasks whose lease ran out (database clock) as expired and add a
        LEASE_EXPIRED input for each (with `executions`: only theirs); returns how many."""

    def maintain(self) -> None:
        """Housekeeping of the queue tables, cheap enough to call every few seconds
        (PostgreSQL: vacuum the queue and the inbox, whose rows are rewritten at a high
        rate, so claims stay as fast as on a fresh table). A no-op where not needed."""

    def get_task(self, task_id: str) -> dict[str, Any] | None:
        """A task_queue row as a dict (status, attempt, lease_token, worker_id, ...)."""


class DeadLetterPort(Protocol):
    """The dead-letter queue, as operators see it."""

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

    def pending_dead_letters(self, execution_id: str) -> dict[str, int]:
        """How many PENDING entries the execution has, by step; {} when none."""

    def post_replay(self, message_id: str, payload: dict[str, Any]) -> bool:
        """Replay a PENDING entry: in ONE transaction mark it replayed (replays + 1) and
        post a REPLAY input with `payload` for its execution. False (nothing written) when
        the entry is not pending: replaying twice replays once. NotFoundError when there
        is no such entry."""

    def discard_dead_letter(self, message_id: str, reason: str) -> bool:
        """Mark a PENDING entry discarded with `reason`; False when it is not pending,
        NotFoundError when there is no such entry."""


class CatalogPort(Protocol):
    """The playbook catalog."""

    def register_playbook(self, path: str, name: str, text: str, now: float) -> PlaybookRecord:
        """Store a new version of the playbook at `path` (1, 2, ...); the same text as
        the latest version returns that version instead of adding one."""

    def get_playbook(self, path: str, version: int | None = None) -> PlaybookRecord | None:
        """A version of a registered playbook (the latest when `version` is None)."""

    def list_playbooks(self) -> list[PlaybookRecord]:
        """The latest version of every registered playbook, by path."""


class AdminPort(Protocol):
    """What the API and the metrics exporter read besides executions."""

    @property
    def tokens(self) -> TokenStore:
        """The API tokens (noetl.auth), in the same database."""

    @property
    def sessions(self) -> SessionStore:
        """The database session store (noetl.sessions), in the same database."""

    @property
    def credentials(self) -> CredentialStore:
        """Encrypted named credentials (noetl.credentials), in the same database."""

    @property
    def results(self) -> ResultStore:
        """Whole results kept outside the event log, in the same database."""

    @property
    def checkpoints(self) -> CheckpointStore:
        """Progress of tasks that run in parts, kept between attempts, in the same database."""

    @property
    def schedules(self) -> ScheduleStore:
        """Schedules and their claimed ticks, in the same database."""

    def stats(self) -> StoreStats:
        """Counts for the metrics exporter (a few grouped queries; called per scrape)."""


class RetentionPort(Protocol):
    """Deleting the history of executions that finished long ago (`noetl db prune`, the
    server's retention job)."""

    def prune(
        self,
        finished_before: float,
        *,
        dead_letters_before: float,
        batch: int = 1000,
        dry_run: bool = False,
    ) -> PruneReport:
        """For every execution that finished (ok, fail, canceled) before `finished_before`
        (epoch seconds) and is not pruned yet: delete its rows of every PRUNED_TABLES
        table but `dlq` and keep its execution row as a tombstone (`pruned_at` set,
        context emptied, its highest fencing token the floor of any task of it queued
        again). Also delete the dead letters of pruned executions settled (replayed,
        discarded) before `dead_letters_before`; a pending one keeps its execution's whole
        history (a replay needs it). Running executions are never touched. Transactions
        of at most `batch` executions, oldest first. `dry_run`: count, delete nothing.
        PostgreSQL: one prune at a time per database (an advisory lock); another returns
        `skipped`. Reading a pruned execution's events or steps raises
        HistoryPrunedError."""

    def rotate_partitions(self, *, period_days: int, ahead_days: int) -> PartitionReport:
        """PostgreSQL: make `event_log`/`step_state` partitions (`period_days` each) for the
        next `ahead_days`; drop the all-pruned ones. Else empty. ValueError: period < 1."""


class Store(
    LeasePort,
    WorkerRegistryPort,
    ExecutionPort,
    InboxPort,
    DeadLetterPort,
    CatalogPort,
    AdminPort,
    RetentionPort,
    Protocol,
):
    """Persistence of executions and their event logs: every role port at once."""

    def close(self) -> None: ...
