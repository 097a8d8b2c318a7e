"""When one execution cannot be decided or written: record it failed, once.

A decision can fail for reasons of one execution's own: the engine raises on its data, or
the store refuses to write its events. Runtimes decide and commit many executions
together, so such a failure must cost that execution only: the others are committed
without it, and it ends `fail` with an event that names the error (`recovery.abort`), its
inputs consumed, and one log line with the traceback. It is never retried: the same data
would fail the same way, and a retried batch would hold back every execution in it.

A store that is unavailable is not such a failure: nothing can be written then, and the
whole batch is tried again later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from noetl.core import ConcurrencyError, Decision, Event, StoreUnavailableError
from noetl.dsl.limits import strip_nul
from noetl.engine import Engine, ExecutionState, StepRun, fold
from noetl.engine.recovery import abort

__all__ = ["TurnDecisions", "aborted", "commit_each", "internal_error", "isolatable", "refold"]

log = logging.getLogger("noetl.runtime")

_MESSAGE = 240  # characters of the exception's message kept in the event


def internal_error(exc: BaseException) -> str:
    """The error recorded on an execution that could not be decided or written: what
    raised and the first line of its message, short (the log has the traceback)."""
    text = strip_nul(str(exc)).strip()
    first = text.splitlines()[0] if text else ""
    if len(first) > _MESSAGE:
        first = first[:_MESSAGE] + "…"
    detail = f": {first}" if first else ""
    return f"internal error: {type(exc).__name__}{detail} (the log has the details)"


def isolatable(exc: BaseException) -> bool:
    """Whether `exc` is a failure of one execution's decision or data (record it on that
    execution) rather than of the store as a whole (retry everything later) or a race
    (ConcurrencyError: decide again on fresh state)."""
    if isinstance(exc, StoreUnavailableError | ConcurrencyError):
        return False
    if getattr(exc, "retryable", False) is True:
        return False  # the database is busy: not this execution's fault
    return isinstance(exc, Exception)


def refold(engine: Engine | None, execution_id: str, events: Sequence[Event]) -> ExecutionState:
    """A fresh state of the execution from its stored events (a cached state may hold a
    decision that was never written). Without an engine (its playbook does not load), the
    steps are those the log names."""
    if engine is not None:
        state = engine.new_state(execution_id)
    else:
        state = ExecutionState.new(execution_id, ())
        for name in dict.fromkeys(e.step for e in events if e.step is not None):
            state.steps.setdefault(name, StepRun())
    return fold(state, events)


class Deciding(Protocol):
    """An execution a runtime decides for: its engine and its state."""

    engine: Engine
    state: ExecutionState


E = TypeVar("E", bound=Deciding)


class TurnDecisions(Generic[E]):
    """The decisions of one turn, as (execution, sequence before, decision); an execution
    whose decision raises is set apart in `failed` (its other decisions of the turn are
    left out with it), to be failed on its own."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.decisions: list[tuple[E, int, Decision]] = []
        self.failed: dict[str, Exception] = {}

    def decide(self, execution: E, event: Event) -> None:
        execution_id = execution.state.execution_id
        if execution_id in self.failed:
            return
        before = execution.state.seq
        try:
            decision = execution.engine.decide(execution.state, event, self.now)
        except Exception as exc:  # one execution's failure must not stop the others
            self.failed[execution_id] = exc
            return
        if decision.events:
            self.decisions.append((execution, before, decision))

    def kept(self) -> list[tuple[E, int, Decision]]:
        """The decisions of the executions that did not fail."""
        return [d for d in self.decisions if d[0].state.execution_id not in self.failed]


Decided = tuple[E, int, Decision]  # an execution, its sequence before, the decision


def aborted(
    execution_id: str,
    execution: E,
    exc: Exception,
    stored: Callable[[], Sequence[Event]],
    now: float,
) -> list[Decided[E]]:
    """The decision that ends an execution that could not be decided or written: logged
    once with the traceback, its state folded afresh from its `stored` events (the one in
    memory may hold events never written), failed with the error (empty: nothing to do)."""
    log.error(
        "execution %s failed: deciding or writing its decision raised %s",
        execution_id,
        type(exc).__name__,
        exc_info=exc,
    )
    state = refold(execution.engine, execution_id, stored())
    execution.state = state
    before = state.seq
    decision = abort(state, internal_error(exc), now)
    return [(execution, before, decision)] if decision.events else []


def commit_each(
    decisions: list[Decided[E]],
    write: Callable[[list[Decided[E]]], None],
    abort_one: Callable[[str, Exception], list[Decided[E]]],
) -> list[Decided[E]]:
    """After a batch the store refused: `write` each execution's decisions on their own;
    one the store refuses ends failed instead (`abort_one`, then written). The decisions
    written, to observe and dispatch. A failure of the store as a whole is raised."""
    grouped: dict[str, list[Decided[E]]] = {}
    for entry in decisions:
        grouped.setdefault(entry[0].state.execution_id, []).append(entry)
    written: list[Decided[E]] = []
    for execution_id, group in grouped.items():
        try:
            write(group)
            written.extend(group)
            continue
        except Exception as exc:
            if not isolatable(exc):
                raise
            ending = abort_one(execution_id, exc)
        try:
            write(ending)
            written.extend(ending)
        except Exception as again:
            if not isolatable(again):
                raise
            log.error("execution %s: its failure could not be recorded: %s", execution_id, again)
    return written
