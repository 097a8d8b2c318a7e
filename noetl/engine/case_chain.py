"""A retry with `scope: chain` of a step whose `on_entry` case runs tools: the chain (the
branches' tools, then the step's own) runs again from its first task.

When the step's own tool fails and its retry policy (`scope: chain`) wants another
attempt, the engine records `retry.started` with `restart: case` instead of requeuing the
task, and starts a timer of the retry's delay (`StartTimer`, kind `chain_restart`). When
it fires, the case is evaluated again and its branches act again (new task ids, one per
round), and once their tasks are done the step's tool runs with the next attempt
(noetl.engine.cases). Attempts count across the chain's runs, so `max_attempts` bounds
them; a failure that is not retried ends the step as for any task. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from noetl.core import StartTimer, StepStatus
from noetl.dsl.model import Step
from noetl.engine import attempts, cases
from noetl.engine.retry import Attempt, RetryAction

if TYPE_CHECKING:
    from noetl.engine.turn import Turn

__all__ = ["CHAIN_RESTART", "chained", "on_timer", "restart"]

CHAIN_RESTART = "chain_restart"  # the `kind` of the timer of a chain's retry delay


def chained(step: Step) -> bool:
    """Whether the step's tool ends a chain its `on_entry` case starts: a case evaluated on
    entry with a branch that runs a tool, and a tool of the step's own (not a loop)."""
    return (
        step.tool is not None
        and step.loop is None
        and step.case_eval_mode == "on_entry"
        and any(branch.then.tool is not None for branch in step.case or ())
    )


def restart(turn: Turn, step: Step, done: Attempt, *, lease_lost: bool) -> bool:
    """True when the failed attempt of the step's tool is retried by running its chain
    again (the retry is recorded and its timer started); False leaves it to the usual
    path (no chain, `scope: tool`, or no retry wanted)."""
    if lease_lost or done.index is not None or not chained(step):
        return False
    rule = done.rule or turn.engine.retry_rules[step.step]
    if rule.scope != "chain":
        return False
    verdict = attempts.assess(turn, done)
    if verdict.action is not RetryAction.RETRY:
        return False
    attempts.retry(turn, done, verdict, restart="case")
    run = turn.state.steps[step.step]
    payload = {"kind": CHAIN_RESTART, "step": step.step, "run": run.run, "task_id": done.task_id}
    turn.commands.append(StartTimer(verdict.delay_s, payload))
    return True


def on_timer(turn: Turn, payload: Mapping[str, Any]) -> bool:
    """A chain's retry delay has passed: its case acts again (True: the timer was one)."""
    if payload.get("kind") != CHAIN_RESTART:
        return False
    name = payload.get("step")
    engine, state = turn.engine, turn.state
    run = state.steps.get(name) if isinstance(name, str) else None
    if (
        run is None
        or not isinstance(name, str)
        or name not in engine.graph.nodes
        or run.status is not StepStatus.RUNNING
        or run.run != payload.get("run")
    ):
        return True  # the step ended meanwhile (canceled), or a timer of an earlier run
    cases.rerun(turn, engine.graph.nodes[name].step)
    return True
