"""The decision context: what a handler of the engine works with while it decides.

A decision (`Engine.start`, `Engine.decide`) runs in one `Turn`: the engine's read-only
`Facts` (the playbook's graph, its options and policy, the renderer, the retry rules and
the plans of its `case` steps), the execution's `ExecutionState`, the caller's `now`, and
what the decision has made so far (its events and commands, the steps still to call).
The handler modules (`outcomes`, `loops`, `cases`, `recovery`, `tasks`, `variables`) take a
`Turn` and act through its public methods: emit an event (which advances the state),
finish a step, dispatch one, route its edges, apply the failure policy, end the
execution. They never see the engine's internals.

This module holds only the two protocols, so every handler can import it: the concrete
turn is `noetl.engine.flow.Flow`, the module that wires the flow of a decision.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol

from noetl.core import Command, Event, EventType, ExecutionStatus
from noetl.dsl.graph import Graph
from noetl.dsl.model import Condition, Playbook, Step
from noetl.dsl.render import Renderer
from noetl.engine.case_plan import CasePlan
from noetl.engine.context import TemplateContext
from noetl.engine.options import EffectivePolicy, EngineOptions
from noetl.engine.retry import RetryDefaults, RetryRule
from noetl.engine.scan import StepScan
from noetl.engine.state import ExecutionState

__all__ = ["Collected", "Facts", "Turn"]

# Outputs of a step (with their `collect.key`, for a map collect), in item order.
Collected = list[tuple[str | None, Any]]


class Facts(Protocol):
    """What the engine knows of its playbook, fixed once it is built (`Engine` is one)."""

    @property
    def graph(self) -> Graph: ...
    @property
    def playbook(self) -> Playbook: ...
    @property
    def renderer(self) -> Renderer: ...
    @property
    def order(self) -> list[str]: ...
    @property
    def position(self) -> Mapping[str, int]: ...
    @property
    def options(self) -> EngineOptions: ...
    @property
    def policy(self) -> EffectivePolicy: ...
    @property
    def retry_defaults(self) -> RetryDefaults: ...
    @property
    def retry_rules(self) -> Mapping[str, RetryRule]: ...
    @property
    def cases(self) -> Mapping[str, CasePlan]: ...
    @property
    def max_lease_expiries(self) -> int: ...
    @property
    def dead_letters(self) -> bool: ...
    @property
    def sink_retry(self) -> dict[str, Any] | None: ...
    @property
    def scan(self) -> StepScan: ...


class Turn(Protocol):
    """One decision in progress: its facts, state and time, what it made, and the flow."""

    @property
    def engine(self) -> Facts: ...
    @property
    def state(self) -> ExecutionState: ...
    @property
    def now(self) -> float: ...
    @property
    def events(self) -> list[Event]: ...
    @property
    def commands(self) -> list[Command]: ...
    @property
    def calls(self) -> deque[tuple[str, str]]:
        """Steps to call, each with what called it, made once the handler returns."""
        ...

    @property
    def restart(self) -> list[str]:
        """Steps a reopened execution runs again."""
        ...

    def emit(self, event_type: EventType, step: str | None, payload: dict[str, Any]) -> Event:
        """Append an event to the decision and advance the state by it."""
        ...

    def ctx(
        self,
        step: Step,
        bind: dict[str, Any] | None = None,
        *,
        index: int | None = None,
        item: Any = None,
        key: Any = None,
    ) -> TemplateContext:
        """The names the step's templates see (of one loop item when `index` is given)."""
        ...

    def dispatch(self, name: str) -> None:
        """Start a step whose gate let it through: its `bind`, case, loop or task."""
        ...

    def outputs(
        self, step: Step, this: Any, index: int | None, item: Any
    ) -> tuple[Any, str | None]:
        """`out` (`result.pick` over `this`) and the `collect.key` of a map collect."""
        ...

    def finish_step(
        self,
        name: str,
        *,
        ok: bool,
        this: Any = None,
        error: str | None = None,
        result: Any = None,
        collected: Collected | None = None,
        picked: bool = False,
    ) -> None:
        """`step.finished` (its outputs, `set` and collect applied), then its routing."""
        ...

    def route(self, step: Step, ok: bool) -> None:
        """Follow a finished step's edges (or its case's routes, or the rollback)."""
        ...

    def edge_fires(
        self, when: Condition | None, ok: bool, ctx: dict[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        """Whether an edge fires, and a note (its render error) for `next.evaluated`."""
        ...

    def apply_failure_policy(self, name: str, error: str | None = None) -> None:
        """A failed step no edge handled: halt (and maybe roll back), continue, or route."""
        ...

    def finish_workflow(self, status: ExecutionStatus, error: str | None) -> None:
        """End the execution: tasks in flight canceled, `workflow.finished`."""
        ...

    def after_loop(self, step: Step, outcome: dict[str, Any]) -> bool:
        """A loop step with a `case` drained its items: True when its case decides how the
        step ends, False to let the loop finish as usual."""
        ...
