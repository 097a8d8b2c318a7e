"""Deciding against the shared store: cached engines and states, and the append to commit.

The orchestrator of `noetl server` decides on inputs from the inbox; a worker decides the
continuation of an execution whose only task in flight it just finished (see
`noetl.worker.runner`). Both use this one class, so a decision is the same wherever it is
made: the engine's `decide` on the state folded from the log, committed with the expected
sequence number. A state that fell behind the log is caught by that commit
(ConcurrencyError) and dropped from the cache.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from noetl.dsl.graph import build_graph
from noetl.dsl.model import Playbook
from noetl.dsl.validate import load_playbook_text
from noetl.engine import CancelTasks, Engine, EnqueueTask, Event, EventType, ExecutionState, fold
from noetl.engine.options import EngineOptions
from noetl.engine.types import Command, RequeueTask
from noetl.runtime.embedded import merge_workload, new_execution_id, new_record
from noetl.store.base import Append, Enqueue, NotFoundError, Requeue, Store


@dataclass
class Cached:
    engine: Engine
    state: ExecutionState


class Decider:
    """Engines by playbook text and execution states by id (LRU), shared by threads."""

    def __init__(
        self,
        store: Store,
        *,
        pool: str = "default",
        cache_size: int = 10_000,
        options: EngineOptions | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        # The engine's defaults (retries, timeouts, policies): the same for every engine
        # here, so a decision is the same whether a server or a worker makes it (given the
        # same configuration).
        self.options = options or EngineOptions()
        # The cache is shared by API threads and the loop thread: every access holds this.
        self._lock = threading.Lock()
        self._engines: dict[str, Engine] = {}
        self._dumped: dict[int, str] = {}  # id(engine.playbook) -> its JSON (engines live on)
        self._states: OrderedDict[str, Cached] = OrderedDict()
        self._cache_size = cache_size

    def engine(
        self, text: str, path: str | None, *, compiled: Callable[[], str | None] | None = None
    ) -> Engine:
        """The engine of a playbook text, built once per text: from its `compiled` model
        when there is one (JSON, validated when the execution was created: much faster
        than parsing the YAML again), else by validating the text."""
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        with self._lock:
            engine = self._engines.get(key)
        if engine is None:
            model = compiled() if compiled is not None else None
            if model is not None:
                playbook = Playbook.model_validate_json(model)
            else:
                playbook = load_playbook_text(text, path or "<inline>").require()
            engine = Engine(build_graph(playbook), options=self.options)
            with self._lock:
                engine = self._engines.setdefault(key, engine)
        return engine

    def start(
        self,
        text: str,
        *,
        path: str | None,
        workload: dict[str, Any] | None,
        parent_execution_id: str | None,
        now: float,
        execution_id: str | None = None,
    ) -> str:
        """Validate a playbook, create its execution (`execution_id`, else a new id) and
        dispatch its first tasks, in one transaction; returns the id. Raises PlaybookError
        (with every diagnostic) for an invalid playbook, ConcurrencyError when an execution
        with that id exists already (nothing is written then)."""
        engine = self.engine(text, path)
        playbook = engine.playbook
        execution_id = execution_id or new_execution_id(now)
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
        initial = self.append(
            state, before=0, events=decision.events, commands=decision.commands, now=now
        )
        self.store.create_execution(record, initial, compiled=self._compiled(engine))
        self.remember(execution_id, Cached(engine, state))
        return execution_id

    def _compiled(self, engine: Engine) -> str:
        """The validated playbook of `engine` as JSON, dumped once per engine (engines are
        cached per text, so starting many executions of one playbook dumps it once)."""
        key = id(engine.playbook)
        with self._lock:
            text = self._dumped.get(key)
        if text is None:
            text = engine.playbook.model_dump_json(by_alias=True)
            with self._lock:
                self._dumped[key] = text
        return text

    def load(self, execution_id: str) -> Cached | None:
        """The execution's state: the cached one as it is (a commit on a stale state fails
        with ConcurrencyError, and the caller forgets it), or one folded from the log.
        None when the execution does not exist."""
        with self._lock:
            cached = self._states.get(execution_id)
        if cached is not None:
            return cached
        record = self.store.get_execution(execution_id)
        if record is None:
            return None
        engine = self.engine(
            record.playbook_text,
            record.playbook_path,
            compiled=lambda: self.store.get_compiled(execution_id),
        )
        cached = Cached(engine, engine.new_state(execution_id))
        if not self.catch_up(cached):
            return None
        self.remember(execution_id, cached)
        return cached

    def catch_up(self, cached: Cached) -> bool:
        """Fold the events the cached state has not seen; False if the execution is gone."""
        try:
            missing = self.store.load_events(cached.state.execution_id, after_seq=cached.state.seq)
        except NotFoundError:
            return False
        fold(cached.state, missing)
        return True

    def remember(self, execution_id: str, cached: Cached) -> None:
        with self._lock:
            self._states[execution_id] = cached
            self._states.move_to_end(execution_id)
            while len(self._states) > self._cache_size:
                self._states.popitem(last=False)

    def forget(self, execution_id: str) -> None:
        with self._lock:
            self._states.pop(execution_id, None)

    def append(
        self,
        state: ExecutionState,
        *,
        before: int,
        events: Sequence[Event],
        commands: Sequence[Command],
        inputs_done: Sequence[int] = (),
        now: float,
    ) -> Append:
        """The store append of one decision: its events, queue changes and projections."""
        finished = any(e.type == EventType.WORKFLOW_FINISHED for e in events)
        touched = set(state.steps) if finished else {e.step for e in events if e.step}
        # A task dispatched as the only one in flight is marked `solo`: its worker may
        # decide what follows it (noetl.worker.runner) instead of reporting to a server.
        solo = len(state.tasks) == 1 and not state.terminal
        enqueue = [
            Enqueue(c.task, pool=self.pool, solo=solo)
            for c in commands
            if isinstance(c, EnqueueTask)
        ]
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
