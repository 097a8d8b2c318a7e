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
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from noetl.core import Command, ConcurrencyError, Event, NotFoundError, Task
from noetl.decision.appends import build_append
from noetl.decision.complexity import admit
from noetl.decision.group_commit import GroupCommit
from noetl.decision.records import merge_workload, new_execution_id, new_record
from noetl.decision.spilled import with_reader
from noetl.dsl.graph import build_graph
from noetl.dsl.limits import check_data
from noetl.dsl.model import Playbook
from noetl.dsl.policy import DslPolicy
from noetl.dsl.validate import load_playbook_text
from noetl.engine import Engine, ExecutionState, fold
from noetl.engine.options import EngineOptions
from noetl.observability import NOOP, Observer
from noetl.observability.trace_context import TraceSampler
from noetl.scripts import ScriptReader
from noetl.store.base import Append, ExecutionRecord, NewExecution, Store
from noetl.store.records import LOAD_MANY

log = logging.getLogger("noetl.decider")


# A state whose workload is bigger than this (as JSON) is not kept between decisions: the
# cache holds up to `cache_size` states, and a few megabytes of JSON are ten times that
# as Python objects. Such an execution is folded from its log when it is decided again.
KEEP_WORKLOAD_BYTES = 1024 * 1024
# How many ids a start makes before it gives up on one another process made too.
ID_TRIES = 3
# Engines kept by playbook text: a server that starts many different inline playbooks
# reads the older ones again (each execution's cached state keeps its engine meanwhile).
ENGINES = 256


@dataclass(frozen=True)
class FirstAppend:
    """One attempt of a start (`Decider.attempt`): the execution to write, its first
    append, and the engine and state that decided it."""

    new: NewExecution
    initial: Append
    engine: Engine
    state: ExecutionState


@dataclass(frozen=True)
class Starting:
    """A validated start (`Decider.starting`), to decide under a new id (or the one given)
    at each attempt (`Decider.attempt`)."""

    engine: Engine
    text: str
    path: str | None
    workload: dict[str, Any]
    parent_execution_id: str | None
    now: float
    execution_id: str | None
    latest: int | None

    def again(self, refused: Exception, attempt: int) -> None:
        """Return when the refused attempt number `attempt` is to be tried again (an id
        made here that another process made too), else raise `refused`."""
        mine = self.execution_id is None and isinstance(refused, ConcurrencyError)
        if not mine or attempt >= ID_TRIES - 1:
            raise refused


@dataclass
class Cached:
    engine: Engine
    state: ExecutionState
    _keep: bool | None = field(default=None, init=False, repr=False)

    @property
    def keep(self) -> bool:
        """Whether the state is small enough to keep cached after a decision (its
        workload, which never changes once started, is measured once)."""
        if self._keep is None:
            if self.state.seq == 0:
                return True  # not started: no workload yet
            found = check_data(self.state.workload, max_bytes=KEEP_WORKLOAD_BYTES)
            self._keep = found is None or found.kind != "size"
        return self._keep


class Decider:
    """Engines by playbook text and execution states by id (LRU), shared by threads."""

    def __init__(
        self,
        store: Store,
        *,
        pool: str = "default",
        cache_size: int = 10_000,
        observer: Observer = NOOP,
        options: EngineOptions | None = None,
        sampler: TraceSampler | None = None,
        scripts: ScriptReader | None = None,
        dsl: DslPolicy | None = None,
    ) -> None:
        self.store = store
        # What a new execution's playbook must satisfy besides being valid (the forms a
        # deployment accepts, strict validation); running executions are not checked again.
        self.dsl = dsl if dsl != DslPolicy() else None
        # Reads the script files a playbook's tools name (noetl.scripts) when it is loaded
        # from its text; a compiled model holds them already.
        self.scripts = scripts
        self.pool = pool
        self.observer = observer
        # Tracing on: which executions are traced, so their queued tasks carry the context.
        self.sampler = sampler
        # The engine's defaults (retries, timeouts, policies): the same for every engine
        # here, so a decision is the same whether a server or a worker makes it (given the
        # same configuration).
        self.options = with_reader(options or EngineOptions(), store.results)
        # The cache is shared by API threads and the loop thread: every access holds this.
        self._lock = threading.Lock()
        # Engines by text (LRU of ENGINES; a running execution's state holds its own).
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._building: dict[str, threading.Event] = {}  # engines being built, by text
        # Texts that passed `dsl` (LRU, as many as engines): checked once each.
        self._admitted: OrderedDict[str, None] = OrderedDict()
        # id(engine.playbook) -> (that playbook, its JSON), for the engines cached.
        self._dumped: dict[int, tuple[Playbook, str]] = {}
        self._states: OrderedDict[str, Cached] = OrderedDict()
        self._cache_size = cache_size
        # Starts that arrive while one is written go together in the next transaction.
        self._starts: GroupCommit[NewExecution, Exception | None] = GroupCommit(
            store.create_executions
        )

    def engine(
        self, text: str, path: str | None, *, compiled: Callable[[], str | None] | None = None
    ) -> Engine:
        """The engine of a playbook text, built once per text: from its `compiled` model
        when there is one (JSON, validated when the execution was created: much faster
        than parsing the YAML again), else by validating the text."""
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        with self._lock:
            engine = self._engines.get(key)
            if engine is not None:
                self._engines.move_to_end(key)
                return engine
            # Threads that want the engine of one text while it is built wait for that
            # build (the tasks of a claim of a new playbook), not build it each.
            building = self._building.get(key)
            if building is None:
                self._building[key] = mine = threading.Event()
        if building is not None:
            building.wait()
            with self._lock:
                engine = self._engines.get(key)
            if engine is not None:
                return engine  # else that build failed: this one tries, with its own error
        try:
            built = self._build(text, path, compiled)
            with self._lock:
                return self._keep_engine(key, built)
        finally:
            if building is None:
                with self._lock:
                    self._building.pop(key, None)
                mine.set()

    def _build(
        self, text: str, path: str | None, compiled: Callable[[], str | None] | None
    ) -> Engine:
        model = compiled() if compiled is not None else None
        if model is not None:
            playbook = Playbook.model_validate_json(model)
            return Engine(build_graph(playbook), options=self.options)
        return self._engine_of(load_playbook_text(text, path or "<inline>").require(), path)

    def _engine_of(self, playbook: Playbook, path: str | None) -> Engine:
        """The engine of a playbook read from its text (its script files read in)."""
        if self.scripts is not None:
            playbook = self.scripts(playbook, path or "<inline>")
        return Engine(build_graph(playbook), options=self.options)

    def _keep_engine(self, key: str, engine: Engine) -> Engine:
        """Cache `engine` under `key` unless one is there (that one wins); called with the
        lock held."""
        engine = self._engines.setdefault(key, engine)
        while len(self._engines) > ENGINES:
            _, dropped = self._engines.popitem(last=False)
            self._dumped.pop(id(dropped.playbook), None)
        return engine

    def prepare(self, text: str, path: str | None, playbook: Playbook) -> None:
        """Keep the engine of `text`, whose validated model the caller holds already (the
        catalog validated it as it registered it): the first start of a registered
        playbook then reads no YAML. Nothing happens when its engine is cached already."""
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        with self._lock:
            if key in self._engines:
                return
        try:
            engine = self._engine_of(playbook, path)
        except Exception as exc:  # a script file missing: its start says so, as before
            log.debug("no engine for %s ahead of its start: %s", path, exc)
            return
        with self._lock:
            self._keep_engine(key, engine)

    def start(
        self,
        text: str,
        *,
        path: str | None,
        workload: dict[str, Any] | None,
        parent_execution_id: str | None,
        now: float,
        execution_id: str | None = None,
        latest: int | None = None,
    ) -> str:
        """Validate a playbook, create its execution (`execution_id`, else a new id) and
        dispatch its first tasks, in one transaction; returns the id. Raises PlaybookError
        (with every diagnostic) for an invalid playbook, ConcurrencyError when an execution
        with that id exists already, StalePlaybookError when `latest` (the version of the
        registered playbook at `path` that `text` is) is no longer the latest (nothing is
        written then)."""
        starting = self.starting(
            text,
            path=path,
            workload=workload,
            parent_execution_id=parent_execution_id,
            now=now,
            execution_id=execution_id,
            latest=latest,
        )
        for attempt in range(ID_TRIES):
            first = self.attempt(starting)
            refused = self._starts.submit(first.new)
            if refused is None:
                return self.started(first)
            starting.again(refused, attempt)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def starting(
        self,
        text: str,
        *,
        path: str | None,
        workload: dict[str, Any] | None,
        parent_execution_id: str | None,
        now: float,
        execution_id: str | None = None,
        latest: int | None = None,
    ) -> Starting:
        """A start validated (`start`'s errors) and ready to be decided (`Starting`)."""
        if self.dsl is not None:
            self._admit(text, path, self.dsl)
        engine = self.engine(text, path)
        playbook = engine.playbook
        merged = merge_workload(playbook.workload, workload or {})
        admit(playbook, merged, self.options)  # TooComplexError over complexity.refuse
        return Starting(engine, text, path, merged, parent_execution_id, now, execution_id, latest)

    def attempt(self, starting: Starting) -> FirstAppend:
        """Decide `starting` under a new id (or the one it was given)."""
        chosen = starting.execution_id or new_execution_id(starting.now)
        engine, playbook, now = starting.engine, starting.engine.playbook, starting.now
        state = engine.new_state(chosen)
        decision = engine.start(state, starting.workload, now)
        record = new_record(
            playbook,
            chosen,
            text=starting.text,
            path=starting.path,
            now=now,
            parent_execution_id=starting.parent_execution_id,
        )
        initial = self.append(
            state,
            before=0,
            events=decision.events,
            commands=decision.commands,
            now=now,
            playbook=playbook,
        )
        new = NewExecution(record, initial, self._compiled(engine), starting.latest)
        return FirstAppend(new, initial, engine, state)

    def warm(self, text: str) -> bool:
        """Whether a start of `text` reads and builds nothing (its engine is kept, and it
        was admitted by the DSL policy): it is then only CPU, a few hundred microseconds."""
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        with self._lock:
            return key in self._engines and (self.dsl is None or key in self._admitted)

    def submit_starts(self, items: list[NewExecution]) -> list[Exception | None]:
        """Write new executions with the starts that wait meanwhile (`Store.create_executions`
        through the group commit): each one's refusal, or None."""
        return self._starts.submit_many(items)

    def started(self, first: FirstAppend) -> str:
        """Its execution written: keep its state, observe its first events; its id."""
        cached = Cached(first.engine, first.state)
        execution_id = first.new.record.execution_id
        if cached.keep:
            self.remember(execution_id, cached)
        self.observer.committed(first.engine.graph, first.state, first.initial.events)
        return execution_id

    def _admit(self, text: str, path: str | None, policy: DslPolicy) -> None:
        """Raise PlaybookError unless `text` satisfies `policy`: checked once per text
        (the texts admitted last are kept, as many as engines)."""
        key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        with self._lock:
            if key in self._admitted:
                self._admitted.move_to_end(key)
                return
        load_playbook_text(text, path or "<inline>", policy=policy).require()
        with self._lock:
            self._admitted[key] = None
            while len(self._admitted) > ENGINES:
                self._admitted.popitem(last=False)

    def _compiled(self, engine: Engine) -> str:
        """The validated playbook of `engine` as JSON, dumped once per engine (engines are
        cached per text, so starting many executions of one playbook dumps it once)."""
        playbook = engine.playbook
        with self._lock:
            found = self._dumped.get(id(playbook))
        if found is not None and found[0] is playbook:
            return found[1]
        text = playbook.model_dump_json(by_alias=True)
        with self._lock:
            if any(cached is engine for cached in self._engines.values()):
                self._dumped[id(playbook)] = (playbook, text)
        return text

    def load(self, execution_id: str) -> Cached | None:
        """The execution's state: the cached one as it is (a commit on a stale state fails
        with ConcurrencyError, and the caller forgets it), or one folded from the log.
        None when the execution does not exist, or retention deleted its history (its
        playbook and events are gone: nothing can be decided for it)."""
        with self._lock:
            cached = self._states.get(execution_id)
        if cached is not None:
            return cached
        loaded = self.store.load_execution(execution_id)  # its row and events: one read
        if loaded is None:
            return None
        cached = self._folded(execution_id, *loaded)
        self.remember(execution_id, cached)
        return cached

    def load_many(self, execution_ids: Collection[str], *, max_events: int) -> int:
        """Cache the states of those of `execution_ids` not cached yet, read together
        (`Store.load_executions`: the young ones, with at most `max_events` events, which
        `load` then finds); how many it cached. A state cached meanwhile by `load` (a
        thread deciding for that execution) is kept, not replaced."""
        with self._lock:
            wanted = sorted({e for e in execution_ids if e not in self._states})
        cached = 0
        for first in range(0, len(wanted), LOAD_MANY):
            chunk = wanted[first : first + LOAD_MANY]
            for execution_id, (record, events) in self.store.load_executions(
                chunk, max_events=max_events
            ).items():
                folded = self._folded(execution_id, record, events)
                cached += self.remember(execution_id, folded, only_new=True)
        return cached

    def _folded(self, execution_id: str, record: ExecutionRecord, events: list[Event]) -> Cached:
        engine = self.engine(
            record.playbook_text,
            record.playbook_path,
            compiled=lambda: self.store.get_compiled(execution_id),
        )
        cached = Cached(engine, engine.new_state(execution_id))
        fold(cached.state, events)
        return cached

    def catch_up(self, cached: Cached) -> bool:
        """Fold the events the cached state has not seen; False if the execution is gone."""
        try:
            missing = self.store.load_events(cached.state.execution_id, after_seq=cached.state.seq)
        except NotFoundError:
            return False
        fold(cached.state, missing)
        return True

    def remember(self, execution_id: str, cached: Cached, *, only_new: bool = False) -> bool:
        """Cache `cached` as the execution's state (`only_new`: unless one is cached
        already); whether it was."""
        with self._lock:
            if only_new and execution_id in self._states:
                return False
            self._states[execution_id] = cached
            self._states.move_to_end(execution_id)
            while len(self._states) > self._cache_size:
                self._states.popitem(last=False)
        return True

    def committed(self, appends: Iterable[Append]) -> None:
        """Tell the observer about appends just committed (their states are cached: a
        decision is committed before its execution is forgotten), then forget the states
        too big to keep (`Cached.keep`)."""
        for append in appends:
            with self._lock:
                cached = self._states.get(append.execution_id)
            if cached is not None and not cached.keep:
                self.forget(append.execution_id)
            if self.observer is NOOP:
                continue
            if cached is not None and append.events:
                try:
                    self.observer.committed(cached.engine.graph, cached.state, append.events)
                except Exception:  # metrics and logs must not undo or repeat a commit
                    log.exception("observing the commit of %s failed", append.execution_id)

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
        playbook: Playbook | None = None,
    ) -> Append:
        """The store append of one decision: its events, queue changes, projections and
        dead-letter entries (`noetl.decision.appends`; `playbook`, when given, scores the
        plan's complexity in them)."""
        execution_id = state.execution_id
        return build_append(
            state,
            before=before,
            events=events,
            commands=commands,
            now=now,
            find_task=lambda task_id: self.find_task(execution_id, task_id),
            inputs_done=inputs_done,
            pool=self.pool,
            sampler=self.sampler,
            playbook=playbook,
            complexity_warn=self.options.complexity_warn,
        )

    def find_task(self, execution_id: str, task_id: str) -> dict[str, Any] | None:
        """A task as it was dispatched: its queue row, else (a row that cannot be decoded,
        a task of the embedded runtime) the event of the log that dispatched it. Called
        for dead letters only."""
        try:
            row = self.store.get_task(task_id)
            if row is not None:
                payload = dict(row["payload"])
                Task.from_dict(payload)
                payload.pop("solo", None)
                return payload
        except (ValueError, KeyError, TypeError):
            pass  # a poison message: the log still has the task as dispatched
        return dispatched_task(self.store, execution_id, task_id)


def dispatched_task(store: Store, execution_id: str, task_id: str) -> dict[str, Any] | None:
    """The task `task_id` from the `step.started` / `loop.iteration.started` event that
    dispatched it, or None."""
    try:
        events = store.load_events(execution_id)
    except NotFoundError:
        return None
    for event in reversed(events):
        task = event.payload.get("task")
        if isinstance(task, dict) and task.get("task_id") == task_id:
            return dict(task)
    return None
