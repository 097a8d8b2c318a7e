"""The orchestrator of distributed mode: turns inputs from the inbox into decisions.

Any number of orchestrators (one per `noetl server`) may run against one database:

* Inputs (worker outcomes, cancel requests, expired leases) wait in the store's inbox.
  An orchestrator holds a batch of them for a while (`claim_inputs`), so two servers do
  not work on the same input at once.
* For each execution in the batch it brings its cached state up to date from the log
  (events after the cached sequence), lets the engine decide, and commits the new events,
  the new and canceled tasks, the projections and the consumed inputs in ONE transaction
  with the expected sequence number. If another server got there first the commit fails
  with ConcurrencyError, nothing is written, and the batch is decided again on fresh state.
  So a step is never dispatched twice, and a restarted server resumes from the log.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from noetl.dsl.graph import build_graph
from noetl.dsl.validate import load_playbook_text
from noetl.engine import (
    CancelTasks,
    Decision,
    Engine,
    EnqueueTask,
    Event,
    EventType,
    ExecutionState,
    fold,
)
from noetl.engine.types import Command, RequeueTask
from noetl.runtime.embedded import merge_workload, new_execution_id, new_record
from noetl.store.base import (
    Append,
    ConcurrencyError,
    Enqueue,
    Input,
    InputKind,
    NotFoundError,
    Requeue,
    Store,
)

log = logging.getLogger("noetl.orchestrator")
Clock = Callable[[], float]


@dataclass
class _Cached:
    engine: Engine
    state: ExecutionState


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
    ) -> None:
        self.store = store
        self.owner = owner
        self.clock = clock
        self.pool = pool
        self.input_lease_s = input_lease_s
        self.reap_interval_s = reap_interval_s
        self._last_reap = float("-inf")
        # start_execution runs in API threads while the loop thread decides: the caches
        # are shared, so every access to them holds this lock.
        self._lock = threading.Lock()
        self._engines: dict[str, Engine] = {}
        self._states: OrderedDict[str, _Cached] = OrderedDict()
        self._cache_size = cache_size

    # --- starting and canceling ----------------------------------------------------------

    def start_execution(
        self,
        text: str,
        *,
        path: str | None = None,
        workload: dict[str, Any] | None = None,
        parent_execution_id: str | None = None,
    ) -> str:
        """Validate a playbook, create its execution and dispatch its first tasks, in one
        transaction. Raises PlaybookError (with every diagnostic) for an invalid playbook."""
        engine = self._engine(text, path)
        playbook = engine.playbook
        now = self.clock()
        execution_id = new_execution_id(now)
        merged = merge_workload(playbook.workload, workload or {})
        state = engine.new_state(execution_id)
        decision = engine.start(state, merged, now)
        record = new_record(
            playbook,
            execution_id,
            text=text,
            path=path,
            workload=merged,
            now=now,
            parent_execution_id=parent_execution_id,
        )
        initial = self._append(
            state,
            before=0,
            events=decision.events,
            commands=decision.commands,
            inputs_done=[],
            now=now,
        )
        self.store.create_execution(record, initial)
        self._remember(execution_id, _Cached(engine, state))
        return execution_id

    def cancel(self, execution_id: str, *, by: str = "api") -> bool:
        """Ask for an execution to be canceled; False if it is unknown or already finished.
        Canceling twice is harmless: the second request changes nothing."""
        record = self.store.get_execution(execution_id)
        if record is None or record.status.terminal:
            return False
        self.store.post_input(execution_id, InputKind.CANCEL, {"by": by})
        return True

    # --- the loop ------------------------------------------------------------------------

    def run_once(self, *, limit: int = 500) -> int:
        """Reap expired leases (at most every `reap_interval_s`), then decide on a batch of
        inputs. Returns inputs handled."""
        now = time.monotonic()
        if now - self._last_reap >= self.reap_interval_s:
            self._last_reap = now
            self.store.reap_expired()
        inputs = self.store.claim_inputs(self.owner, limit=limit, lease_s=self.input_lease_s)
        by_execution: OrderedDict[str, list[Input]] = OrderedDict()
        for item in inputs:
            by_execution.setdefault(item.execution_id, []).append(item)
        if by_execution:
            self._decide_batch(by_execution)
        return len(inputs)

    def serve(self, should_stop: Callable[[], bool], *, idle_wait: float = 0.5) -> None:
        """Run until `should_stop()`: wake on new inputs (or poll), decide, repeat."""
        while not should_stop():
            try:
                handled = self.run_once()
            except Exception:  # keep serving: a database blip must not kill the server
                log.exception("orchestrator turn failed; retrying")
                time.sleep(idle_wait)
                continue
            if handled == 0:
                self.store.wait_for("inputs", idle_wait)

    # --- deciding ------------------------------------------------------------------------

    def _decide_batch(self, groups: dict[str, list[Input]]) -> None:
        """Decide every execution's inputs and commit them all in ONE transaction; if any
        execution advanced elsewhere, nothing is written and each is decided on its own."""
        appends: list[Append] = []
        decided: list[str] = []
        now = self.clock()
        try:
            for execution_id, items in groups.items():
                append = self._decide(execution_id, items, now)
                if append is not None:
                    appends.append(append)
                    decided.append(execution_id)
            if appends:
                self.store.commit(appends)
            return
        except ConcurrencyError:
            log.info("an execution of the batch advanced elsewhere; deciding one by one")
        except Exception:
            for execution_id in decided:  # their states hold events that were not written
                self._forget(execution_id)
            raise
        for execution_id in decided:
            self._forget(execution_id)
        for execution_id, items in groups.items():
            self._decide_inputs(execution_id, items)

    def _decide(self, execution_id: str, items: Sequence[Input], now: float) -> Append | None:
        """Decide on one execution's inputs (advancing its cached state); the append to
        commit, or None when the execution is gone (its inputs are dropped)."""
        cached = self._load(execution_id)
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
        return self._append(
            state,
            before=before,
            events=events,
            commands=commands,
            inputs_done=[i.id for i in items],
            now=now,
        )

    def _decide_inputs(self, execution_id: str, items: Sequence[Input], attempts: int = 3) -> None:
        for _ in range(attempts):
            append = self._decide(execution_id, items, self.clock())
            if append is None:
                return
            try:
                self.store.commit([append])
                return
            except ConcurrencyError:
                log.info("execution %s advanced elsewhere; deciding again", execution_id)
                self._forget(execution_id)
            except Exception:
                # The cached state already holds the events that were not written.
                self._forget(execution_id)
                raise
        log.warning("gave up deciding %d inputs of %s for now", len(items), execution_id)
        self._forget(execution_id)

    def _decide_one(self, cached: _Cached, item: Input, now: float) -> Decision:
        state = cached.state
        if item.kind is InputKind.OUTCOME:
            event = Event(0, EventType.TOOL_PROCESSED, state.execution_id, now, None, item.payload)
        elif item.kind is InputKind.CANCEL:
            event = Event(
                0, EventType.CANCEL_REQUESTED, state.execution_id, now, None, item.payload
            )
        elif item.kind is InputKind.LEASE_EXPIRED:
            event = Event(0, EventType.LEASE_EXPIRED, state.execution_id, now, None, item.payload)
        else:  # pragma: no cover - InputKind is closed
            return Decision([], [])
        return cached.engine.decide(state, event, now)

    def _append(
        self,
        state: ExecutionState,
        *,
        before: int,
        events: Sequence[Event],
        commands: Sequence[Command],
        inputs_done: Sequence[int],
        now: float,
    ) -> Append:
        finished = any(e.type == EventType.WORKFLOW_FINISHED for e in events)
        touched = set(state.steps) if finished else {e.step for e in events if e.step}
        enqueue = [Enqueue(c.task, pool=self.pool) for c in commands if isinstance(c, EnqueueTask)]
        requeue = [
            Requeue(c.task_id, c.attempt, c.delay_s) for c in commands if isinstance(c, RequeueTask)
        ]
        cancel = [t for c in commands if isinstance(c, CancelTasks) for t in c.task_ids]
        return Append(
            execution_id=state.execution_id,
            expected_seq=before,
            events=list(events),
            status=state.status if finished else None,
            steps={name: state.steps[name].summary() for name in touched if name in state.steps},
            context=dict(state.context) if finished else None,
            now=now,
            enqueue=enqueue,
            requeue=requeue,
            cancel_tasks=cancel,
            inputs_done=list(inputs_done),
        )

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

    # --- state cache ---------------------------------------------------------------------

    def _load(self, execution_id: str) -> _Cached | None:
        """The execution's state: the cached one as it is (a commit on a stale state fails
        with ConcurrencyError, which drops it from the cache), or one folded from the log."""
        with self._lock:
            cached = self._states.get(execution_id)
        if cached is not None:
            return cached
        record = self.store.get_execution(execution_id)
        if record is None:
            return None
        engine = self._engine(record.playbook_text, record.playbook_path)
        cached = _Cached(engine, engine.new_state(execution_id))
        try:
            missing = self.store.load_events(execution_id, after_seq=cached.state.seq)
        except NotFoundError:
            return None
        fold(cached.state, missing)
        self._remember(execution_id, cached)
        return cached

    def _remember(self, execution_id: str, cached: _Cached) -> None:
        with self._lock:
            self._states[execution_id] = cached
            self._states.move_to_end(execution_id)
            while len(self._states) > self._cache_size:
                self._states.popitem(last=False)

    def _forget(self, execution_id: str) -> None:
        with self._lock:
            self._states.pop(execution_id, None)

    def _engine(self, text: str, path: str | None) -> Engine:
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        with self._lock:
            engine = self._engines.get(key)
        if engine is None:
            playbook = load_playbook_text(text, path or "<inline>").require()
            engine = Engine(build_graph(playbook))
            with self._lock:
                engine = self._engines.setdefault(key, engine)
        return engine
