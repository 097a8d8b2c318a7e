"""The engine: a pure, deterministic state machine over an execution's event log.

`Engine.start` and `Engine.decide` take the state, an input and `now`, and return a
`Decision`: the events to append (in order; the state has already been advanced by them)
and the commands for the runtime (enqueue a task, requeue one, cancel tasks). No I/O, no
clock, no randomness: the same inputs always give the same events. Mistakes in a playbook
found at run time (a bad template, a missing key) become failed steps, never exceptions.

The `Engine` holds what it knows of its playbook, fixed once it is built (the `Facts` of
`noetl.engine.turn`: the graph, the options and policy, the renderer, the retry rules, the
plans of the `case` steps). A decision runs in a `Turn` (`noetl.engine.flow.Flow`):
`decide` looks the input's type up in `HANDLERS` and calls its handler with the turn,
then the turn settles (pending calls, parked gates, the end of the execution). The
handlers:

* `noetl.engine.outcomes`: a task's outcome and a lost lease (retries and dead letters in
  `noetl.engine.attempts`, loop items in `noetl.engine.loops`, a step's `case` in
  `noetl.engine.cases`);
* `noetl.engine.recovery`: an operator's replay (which may reopen a finished execution)
  and force-complete, and a loop's total budget (a timer);
* `on_cancel` (here): a cancel request ends the execution.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from noetl.core import Decision, Event, EventType, ExecutionStatus
from noetl.dsl.graph import Graph
from noetl.dsl.render import Renderer
from noetl.engine import outcomes, recovery
from noetl.engine.case_plan import CasePlan
from noetl.engine.flow import Flow
from noetl.engine.options import EngineOptions, effective_policy
from noetl.engine.retry import RetryDefaults, RetryRule, rule_for
from noetl.engine.scan import StepScan
from noetl.engine.state import ExecutionState
from noetl.engine.turn import Turn

__all__ = ["AFTER_END", "HANDLERS", "Engine", "Handler", "on_cancel"]

Handler = Callable[[Turn, Event], None]


def on_cancel(turn: Turn, event: Event) -> None:
    """A cancel request: recorded, then the execution ends `canceled`."""
    turn.emit(EventType.CANCEL_REQUESTED, None, dict(event.payload))
    turn.finish_workflow(ExecutionStatus.CANCELED, "canceled")


# The handler of each input the engine takes, by its type (an `EventType` value).
HANDLERS: Mapping[str, Handler] = {
    EventType.TOOL_PROCESSED: outcomes.on_outcome,
    EventType.LEASE_EXPIRED: outcomes.on_lease_expired,
    EventType.CANCEL_REQUESTED: on_cancel,
    EventType.STEP_FORCE_COMPLETED: recovery.on_force_complete,
    EventType.TIMER_FIRED: recovery.on_timer,
    EventType.TASK_REPLAYED: recovery.on_replay,
}

# The inputs taken after the execution has ended (a replay reopens it); others are dropped.
AFTER_END = frozenset({EventType.TASK_REPLAYED})


class Engine:
    """Decides what happens next in executions of one playbook graph."""

    def __init__(
        self,
        graph: Graph,
        renderer: Renderer | None = None,
        *,
        max_lease_expiries: int = 3,
        retry_defaults: RetryDefaults | None = None,
        options: EngineOptions | None = None,
    ) -> None:
        self.max_lease_expiries = max_lease_expiries
        self.graph = graph
        self.playbook = graph.playbook
        self.renderer = renderer or Renderer()
        self.order = graph.order
        self.position = {name: index for index, name in enumerate(self.order)}
        # Defaults for what the playbook leaves unsaid (from the configuration).
        self.options = options or EngineOptions()
        # The policy of a step without `retry` (`retry_defaults` overrides the options').
        self.retry_defaults = retry_defaults or self.options.retry
        # The playbook's `policy` with the keys it leaves unset filled in.
        self.policy = effective_policy(self.playbook, self.options)
        # Record tasks that fail for good as `task.dead_lettered` (the DLQ); off, they
        # only fail their step.
        self.dead_letters = self.options.dead_letters
        # For building tasks (noetl.engine.tasks): a sink's default retry, and what each
        # step's tool templates mention (filled in as steps are dispatched).
        self.sink_retry = self.options.sink_retry_json()
        self.scan = StepScan()
        self.retry_rules: dict[str, RetryRule] = {
            step.step: rule_for(step, self.playbook, self.retry_defaults)
            for step in self.playbook.workflow
            if step.tool is not None
        }
        # The `case` of each step that has one, resolved once (noetl.engine.cases).
        self.cases: dict[str, CasePlan] = {
            step.step: CasePlan.of(step, self.playbook, self.retry_defaults)
            for step in self.playbook.workflow
            if step.case
        }

    # --- inputs --------------------------------------------------------------------------

    def new_state(self, execution_id: str) -> ExecutionState:
        return ExecutionState.new(execution_id, self.order)

    def start(self, state: ExecutionState, workload: dict[str, Any], now: float) -> Decision:
        """Begin an execution: record the workload and call the entry step."""
        turn = Flow(self, state, now)
        turn.emit(EventType.WORKFLOW_STARTED, None, {"workload": workload})
        turn.calls.append((self.graph.entry, "execution"))
        return turn.settle()

    def decide(self, state: ExecutionState, event: Event, now: float) -> Decision:
        """React to an input event: a task outcome, an expired lease, a cancel request, a
        timer, or an operator's replay (which may reopen a finished execution) or
        force-complete (see `noetl.engine.recovery`). Its handler is `HANDLERS[event.type]`."""
        if state.terminal and event.type not in AFTER_END:
            return Decision([], [])  # late input after the end: discarded
        handler = HANDLERS.get(event.type)
        if handler is None:
            raise ValueError(f"the engine does not take {event.type!r} as an input")
        turn = Flow(self, state, now)
        handler(turn, event)
        return turn.settle()
