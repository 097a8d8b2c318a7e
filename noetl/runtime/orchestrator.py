"""The orchestrator of distributed mode: turns inputs from the inbox into decisions.

Any number of orchestrators (one per `noetl server`) may run against one database:

* Inputs (worker outcomes, cancel requests, expired leases) wait in the store's inbox.
  An orchestrator holds a batch of them for a while (`claim_inputs`), so two servers do
  not work on the same input at once. It holds them as an input holder
  (`Store.open_holder`): when it dies, any orchestrator frees what it held at its next
  reap (`release_orphaned_inputs`) instead of waiting for the hold to expire.
* For each execution in the batch it brings its cached state up to date from the log
  (events after the cached sequence), lets the engine decide, and commits the new events,
  the new and canceled tasks, the projections and the consumed inputs in ONE transaction
  with the expected sequence number. If another server got there first the commit fails
  with ConcurrencyError, nothing is written, and the batch is decided again on fresh state,
  without the inputs another commit consumed already (they were decided there). So a step
  is never dispatched twice, an input is decided once, and a restarted server resumes
  from the inbox and the log.
* One execution's failure stays its own: if its decision raises, or the store refuses its
  events, the others of the batch are committed without it and it ends `fail`, recorded
  once (noetl.runtime.failures); only an unavailable store makes the whole turn wait.

A scoped orchestrator (`scope`: the executions it decides for, asked at every turn) is
what a command working for one execution on a shared database runs: it takes only their
inputs and reaps only their leases, and leaves the queue's housekeeping to the servers.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from noetl.core import (
    Command,
    ConcurrencyError,
    Decision,
    Event,
    EventType,
    NotFoundError,
    StoreUnavailableError,
)
from noetl.decision.decider import Cached, Decider
from noetl.decision.dlq import DeadLetterQueue
from noetl.dsl.policy import DslPolicy
from noetl.engine import Engine
from noetl.engine.options import EngineOptions
from noetl.engine.recovery import abort
from noetl.errors import ConflictError
from noetl.observability import NOOP, Observer
from noetl.observability.trace_context import TraceSampler
from noetl.runtime.failures import internal_error, isolatable, refold
from noetl.scripts import ScriptReader
from noetl.store.base import Append, ExecutionRecord, Input, InputHolder, InputKind, Store

log = logging.getLogger("noetl.orchestrator")
Clock = Callable[[], float]
# The event each kind of input is decided as.
_INPUT_EVENTS = {
    InputKind.OUTCOME: EventType.TOOL_PROCESSED,
    InputKind.CANCEL: EventType.CANCEL_REQUESTED,
    InputKind.LEASE_EXPIRED: EventType.LEASE_EXPIRED,
    InputKind.REPLAY: EventType.TASK_REPLAYED,
    InputKind.FORCE_COMPLETE: EventType.STEP_FORCE_COMPLETED,
    InputKind.TIMER: EventType.TIMER_FIRED,
}


class Orchestrator:
    """Starts executions and decides on their inputs, against a shared store."""

    def __init__(
        self,
        store: Store,
        *,
        owner: str,
        clock: Clock = time.time,
        pool: str = "default",
        cache_size: int = 10_000,
        input_lease_s: float = 30.0,
        reap_interval_s: float = 0.5,
        maintain_interval_s: float = 5.0,
        observer: Observer = NOOP,
        options: EngineOptions | None = None,
        sampler: TraceSampler | None = None,
        scope: Callable[[], Collection[str]] | None = None,
        scripts: ScriptReader | None = None,
        dsl: DslPolicy | None = None,
    ) -> None:
        self.store = store
        self.owner = owner
        self.scope = scope
        self.clock = clock
        self.pool = pool
        self.input_lease_s = input_lease_s
        self.reap_interval_s = reap_interval_s
        self._last_reap = float("-inf")
        self.maintain_interval_s = maintain_interval_s
        self._last_maintain = time.monotonic()
        self.decider = Decider(
            store,
            pool=pool,
            cache_size=cache_size,
            observer=observer,
            options=options,
            sampler=sampler,
            scripts=scripts,
            dsl=dsl,
        )
        self.dlq = DeadLetterQueue(store, self.engine_of)
        self._holder: InputHolder | None = None

    def engine_of(self, record: ExecutionRecord) -> Engine:
        """The engine of an execution (built once per playbook text)."""
        return self.decider.engine(
            record.playbook_text,
            record.playbook_path,
            compiled=lambda: self.store.get_compiled(record.execution_id),
        )

    # --- starting and canceling ----------------------------------------------------------

    def start_execution(
        self,
        text: str,
        *,
        path: str | None = None,
        workload: dict[str, Any] | None = None,
        parent_execution_id: str | None = None,
        execution_id: str | None = None,
        latest: int | None = None,
    ) -> str:
        """Validate a playbook, create its execution and dispatch its first tasks, in one
        transaction. Raises PlaybookError (with every diagnostic) for an invalid playbook,
        ConcurrencyError when an execution with the given `execution_id` exists,
        StalePlaybookError when `latest` is given and a newer version of `path` is
        registered (see `Decider.start`)."""
        return self.decider.start(
            text,
            path=path,
            workload=workload,
            parent_execution_id=parent_execution_id,
            now=self.clock(),
            execution_id=execution_id,
            latest=latest,
        )

    def cancel(self, execution_id: str, *, by: str = "api") -> bool:
        """Ask for an execution to be canceled; False if it is unknown or already finished.
        Canceling twice is harmless: the second request changes nothing."""
        record = self.store.get_execution(execution_id)
        if record is None or record.status.terminal:
            return False
        self.store.post_input(execution_id, InputKind.CANCEL, {"by": by})
        return True

    def force_complete(
        self,
        execution_id: str,
        step: str,
        *,
        status: str = "ok",
        result: Any = None,
        reason: str | None = None,
        by: str = "api",
    ) -> None:
        """Ask for a parked, pending or stuck step to be marked done (`status` ok or failed,
        with `result`); the orchestrator decides it like any input. NotFoundError for an
        unknown execution or step, ConflictError when the execution or step is finished."""
        if status not in ("ok", "failed"):
            raise ValueError(f"status must be ok or failed, got {status!r}")
        _, state = self.dlq.state(execution_id)
        if state.terminal:
            raise ConflictError(f"execution {execution_id} is {state.status.value}")
        run = state.steps.get(step)
        if run is None:
            raise NotFoundError(f"execution {execution_id} has no step '{step}'")
        if run.status.done:
            raise ConflictError(f"step '{step}' is {run.status.value} already")
        payload: dict[str, Any] = {"step": step, "status": status, "by": by}
        if result is not None:
            payload["result"] = result
        if reason:
            payload["reason"] = reason
        self.store.post_input(execution_id, InputKind.FORCE_COMPLETE, payload)

    # --- the loop ------------------------------------------------------------------------

    def run_once(self, *, limit: int = 500) -> int:
        """Reap expired leases and free the inputs of holders that are gone (at most every
        `reap_interval_s`), keep the queue tables tidy (`Store.maintain`, every
        `maintain_interval_s`), then decide on a batch of inputs. Returns inputs handled."""
        holder = self._hold()
        now = time.monotonic()
        executions = None if self.scope is None else self.scope()
        if now - self._last_reap >= self.reap_interval_s:
            self._last_reap = now
            self.store.reap_expired(executions=executions)
            freed = self.store.release_orphaned_inputs()
            if freed:
                log.warning("freed %d inputs held by orchestrators that are gone", freed)
        if executions is None and now - self._last_maintain >= self.maintain_interval_s:
            self._last_maintain = now
            self.store.maintain()
        try:
            inputs = self._claim(holder.token, limit, executions)
        except StoreUnavailableError:
            if holder.alive():
                raise
            # The holder's session ended (PostgreSQL: a lost connection): hold anew.
            holder = self._hold()
            inputs = self._claim(holder.token, limit, executions)
        by_execution: OrderedDict[str, list[Input]] = OrderedDict()
        for item in inputs:
            by_execution.setdefault(item.execution_id, []).append(item)
        if by_execution:
            self._decide_batch(by_execution)
        return len(inputs)

    def _claim(self, token: str, limit: int, executions: Collection[str] | None) -> list[Input]:
        return self.store.claim_inputs(
            token, limit=limit, lease_s=self.input_lease_s, executions=executions
        )

    def serve(self, should_stop: Callable[[], bool], *, idle_wait: float = 0.5) -> None:
        """Run until `should_stop()`: wake on new inputs (or poll), decide, repeat; then
        stop holding inputs (`close`)."""
        try:
            while not should_stop():
                try:
                    handled = self.run_once()
                except Exception:  # keep serving: a database blip must not kill the server
                    log.exception("orchestrator turn failed; retrying")
                    time.sleep(idle_wait)
                    continue
                if handled == 0:
                    self.store.wait_for("inputs", idle_wait)
        finally:
            self.close()

    @property
    def holder_token(self) -> str | None:
        """The token this orchestrator claims inputs with (None before its first turn)."""
        return None if self._holder is None else self._holder.token

    def _hold(self) -> InputHolder:
        """This orchestrator's input holder, opened on the first turn and again, with a
        new token, once the last one is gone (its session ended while this process
        lives): a gone token never claims again, since others free what it holds."""
        holder = self._holder
        if holder is not None and holder.alive():
            return holder
        if holder is not None:
            log.warning("input holder %s lost its session; holding anew", holder.token)
            holder.close()
            self._holder = None
        self._holder = self.store.open_holder(self.owner)
        return self._holder

    def close(self) -> None:
        """Stop holding inputs: what this orchestrator still holds is freed at once by
        the next reap of any orchestrator."""
        holder, self._holder = self._holder, None
        if holder is not None:
            holder.close()

    # --- deciding ------------------------------------------------------------------------

    def _decide_batch(self, groups: dict[str, list[Input]]) -> None:
        """Decide every execution's inputs and commit them all in ONE transaction.

        If some executions advanced elsewhere (a worker continued them, or another server
        decided first), nothing is written: the others' decisions still hold and are
        committed again without them, and those are decided again on fresh state. An
        execution whose decision raises, or that the store refuses to write, fails on its
        own (`_fail`): the others are decided and committed without it."""
        appends = self._decide_each(groups)
        again: list[str] = []
        consumed: set[int] = set()
        for _ in range(3):
            if not appends:
                break
            try:
                self.store.commit(list(appends.values()))
                self.decider.committed(appends.values())
                break
            except ConcurrencyError as exc:
                stale = [e for e in exc.execution_ids if e in appends] or list(appends)
                log.info("%d executions of the batch advanced elsewhere", len(stale))
                consumed.update(exc.input_ids)
                for execution_id in stale:
                    self.decider.forget(execution_id)
                    del appends[execution_id]
                    again.append(execution_id)
            except Exception as exc:
                if not isolatable(exc):
                    self._forget_all(appends)
                    raise
                # The store refused the batch for the data of some execution in it: each
                # is committed on its own, so only the ones it refuses fail.
                again.extend(self._commit_each(appends, groups, consumed))
                appends = {}
        else:
            self._forget_all(appends)
            again.extend(appends)
        for execution_id in again:
            self._decide_inputs(
                execution_id, [i for i in groups[execution_id] if i.id not in consumed]
            )

    def _decide_each(self, groups: dict[str, list[Input]]) -> dict[str, Append]:
        """The append of each execution's decision; one whose decision raises fails on its
        own (`_fail`) and has none."""
        appends: dict[str, Append] = {}
        now = self.clock()
        for execution_id, items in groups.items():
            try:
                append = self._decide(execution_id, items, now)
                if append is not None:
                    appends[execution_id] = append
            except Exception as exc:
                self.decider.forget(execution_id)  # its state holds a half-made decision
                try:
                    if not isolatable(exc):
                        raise
                    self._fail(execution_id, items, exc)
                except BaseException:
                    self._forget_all(appends)  # their states hold events not written
                    raise
        return appends

    def _commit_each(
        self, appends: dict[str, Append], groups: dict[str, list[Input]], consumed: set[int]
    ) -> list[str]:
        """Commit each append in a transaction of its own; the executions that advanced
        elsewhere (to decide again, without the inputs another commit consumed: added to
        `consumed`) are returned, the ones the store refuses fail."""
        stale: list[str] = []
        pending = list(appends.items())
        for index, (execution_id, append) in enumerate(pending):
            try:
                self.store.commit([append])
                self.decider.committed([append])
            except ConcurrencyError as exc:
                self.decider.forget(execution_id)
                consumed.update(exc.input_ids)
                stale.append(execution_id)
            except Exception as exc:
                self.decider.forget(execution_id)
                if not isolatable(exc):
                    self._forget_all(e for e, _ in pending[index:])
                    raise
                self._fail(execution_id, groups[execution_id], exc)
        return stale

    def _forget_all(self, execution_ids: Iterable[str]) -> None:
        for execution_id in list(execution_ids):
            self.decider.forget(execution_id)

    def _decide(self, execution_id: str, items: Sequence[Input], now: float) -> Append | None:
        """Decide on one execution's inputs (advancing its cached state); the append to
        commit, or None when the execution is gone (its inputs are dropped)."""
        cached = self.decider.load(execution_id)
        if cached is None:
            self._drop_inputs(execution_id, items)
            return None
        state = cached.state
        before = state.seq
        events: list[Event] = []
        commands: list[Command] = []
        for item in items:
            decision = self._decide_one(cached, item, now)
            events.extend(decision.events)
            commands.extend(decision.commands)
        return self.decider.append(
            state,
            before=before,
            events=events,
            commands=commands,
            inputs_done=[i.id for i in items],
            now=now,
            playbook=cached.engine.playbook,
        )

    def _decide_inputs(self, execution_id: str, items: Sequence[Input], attempts: int = 3) -> None:
        """Decide one execution's inputs again on fresh state; inputs another commit
        consumed meanwhile were decided there and are left out."""
        for _ in range(attempts):
            if not items:
                return
            try:
                append = self._decide(execution_id, items, self.clock())
                if append is None:
                    return
                self.store.commit([append])
                self.decider.committed([append])
                return
            except ConcurrencyError as exc:
                log.info("execution %s advanced elsewhere; deciding again", execution_id)
                self.decider.forget(execution_id)
                items = [i for i in items if i.id not in exc.input_ids]
            except Exception as exc:
                # The cached state already holds the events that were not written.
                self.decider.forget(execution_id)
                if not isolatable(exc):
                    raise
                self._fail(execution_id, items, exc)
                return
        log.warning("gave up deciding %d inputs of %s for now", len(items), execution_id)
        self.decider.forget(execution_id)

    def _fail(self, execution_id: str, items: Sequence[Input], exc: Exception) -> None:
        """Record, once, that the execution could not be decided or written: it ends
        `fail` with an event naming the error, its inputs are consumed, and the log has
        one line with the traceback (see noetl.runtime.failures)."""
        log.error(
            "execution %s failed: deciding %d inputs or writing the decision raised %s",
            execution_id,
            len(items),
            type(exc).__name__,
            exc_info=exc,
        )
        done = [i.id for i in items]
        error = internal_error(exc)
        for _ in range(3):
            try:
                append = self._abort_append(execution_id, error, done)
                if append is not None:
                    self.store.commit([append])
                    self.decider.committed([append])
                    self.decider.forget(execution_id)  # finished: nothing more to decide
                return
            except ConcurrencyError as moved:
                self.decider.forget(execution_id)  # it moved meanwhile: fold it again
                done = [i for i in done if i not in moved.input_ids]
            except Exception as again:
                self.decider.forget(execution_id)
                if not isolatable(again):
                    raise
                log.error(
                    "execution %s: its failure could not be recorded: %s", execution_id, again
                )
                break
        # At least consume its inputs, so they are not decided (and fail) again and again.
        with contextlib.suppress(Exception):
            self._drop_inputs(execution_id, items)

    def _abort_append(self, execution_id: str, error: str, inputs_done: list[int]) -> Append | None:
        """The append that ends the execution failed with `error` (on its state folded
        afresh from the log); None when it is gone."""
        record = self.store.get_execution(execution_id)
        if record is None:
            return None
        try:
            engine: Engine | None = self.engine_of(record)
        except Exception:  # the playbook does not load: the steps come from the log
            engine = None
        events = self.store.load_events(execution_id)
        state = refold(engine, execution_id, events)
        before = state.seq
        now = self.clock()
        decision = abort(state, error, now)
        append = self.decider.append(
            state,
            before=before,
            events=decision.events,
            commands=decision.commands,
            inputs_done=inputs_done,
            now=now,
            playbook=engine.playbook if engine is not None else None,
        )
        if engine is not None:  # cached, so the observer sees the end of the execution
            self.decider.remember(execution_id, Cached(engine, state))
        return append

    def _decide_one(self, cached: Cached, item: Input, now: float) -> Decision:
        state = cached.state
        event = Event(0, _INPUT_EVENTS[item.kind], state.execution_id, now, None, item.payload)
        return cached.engine.decide(state, event, now)

    def _drop_inputs(self, execution_id: str, items: Sequence[Input]) -> None:
        """Inputs for an execution that is gone or finished: consume them, change nothing."""
        record = self.store.get_execution(execution_id)
        if record is None:
            log.warning("dropping %d inputs of unknown execution %s", len(items), execution_id)
            return
        append = Append(
            execution_id,
            record.last_seq,
            [],
            inputs_done=[i.id for i in items],
            now=self.clock(),
        )
        with contextlib.suppress(ConcurrencyError):
            self.store.commit([append])
