"""A step's `case`, resolved once per playbook: each branch's actions, verdict, retry
policies and sinks, and the order its branches are evaluated in (see noetl.engine.cases)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from noetl.dsl.model import (
    CaseBranch,
    CaseThen,
    Condition,
    Playbook,
    Result,
    Sink,
    Step,
    StepSpec,
    Tool,
)
from noetl.engine.retry import RetryDefaults, RetryRule, rule_for_tool

# The actions of a branch, in the order they act (and are listed in events).
ACTIONS = ("set", "tool", "result", "sink", "retry", "fail", "skip", "next")
# The actions that end the step, the first present wins.
VERDICTS = ("fail", "skip", "retry")


@dataclass(frozen=True, slots=True)
class BranchPlan:
    """One branch: its condition, its actions, and what they resolve to."""

    index: int
    when: Condition
    then: CaseThen
    priority: int | None
    actions: tuple[str, ...]
    verdict: str | None  # fail, skip or retry: how the branch ends the step
    fail_message: str
    retry_rule: RetryRule | None  # the policy of a `retry` action
    tool: Tool | None
    kind: str | None  # the kind its task runs (a workbook call: its task's)
    tool_rule: RetryRule | None  # the retry policy of its tool
    result: Result | None
    sinks: tuple[Sink, ...]  # `result.sink`, then `sink`

    @property
    def routes(self) -> bool:
        return self.then.next is not None

    @classmethod
    def of(
        cls, index: int, branch: CaseBranch, playbook: Playbook, defaults: RetryDefaults
    ) -> BranchPlan:
        then = branch.then
        present = {
            "set": bool(then.set),
            "tool": then.tool is not None,
            "result": then.result is not None,
            "sink": bool(then.sink),
            "retry": then.retry is not None,
            "fail": then.fail is not None and then.fail is not False,
            "skip": bool(then.skip),
            "next": then.next is not None,
        }
        message = then.fail if isinstance(then.fail, str) and then.fail else ""
        tool = then.tool
        return cls(
            index=index,
            when=branch.when,
            then=then,
            priority=branch.priority,
            actions=tuple(a for a in ACTIONS if present[a]),
            verdict=next((v for v in VERDICTS if present[v]), None),
            fail_message=message or f"case[{index}] failed the step",
            retry_rule=RetryRule.of_block(then.retry, "step") if then.retry else None,
            tool=tool,
            kind=None if tool is None else _kind(tool, playbook),
            tool_rule=None if tool is None else rule_for_tool(tool, playbook, defaults),
            result=then.result,
            sinks=tuple(then.result.sink if then.result else ()) + tuple(then.sink or ()),
        )


def _kind(tool: Tool, playbook: Playbook) -> str:
    """The kind of tool a task runs (a workbook call: its task's tool)."""
    if tool.kind == "workbook":
        try:
            return playbook.task(str(tool.spec.get("name"))).tool.kind
        except KeyError:
            pass  # the validator reports it; the dispatch fails the step
    return tool.kind


@dataclass(frozen=True, slots=True)
class CasePlan:
    """A step's case: its options and its branches, and the order they are evaluated in."""

    step: str
    spec: StepSpec
    eval_mode: str  # `spec.eval_mode`, or the step's default (`Step.case_eval_mode`)
    branches: tuple[BranchPlan, ...]
    order: tuple[int, ...]

    @property
    def on_entry(self) -> bool:
        return self.eval_mode == "on_entry"

    @classmethod
    def of(cls, step: Step, playbook: Playbook, defaults: RetryDefaults) -> CasePlan:
        branches = tuple(
            BranchPlan.of(i, branch, playbook, defaults) for i, branch in enumerate(step.case or ())
        )
        spec = step.spec or StepSpec()
        order = [b.index for b in branches]
        if spec.branch_order == "priority":
            # Lowest priority first; branches without one after; ties in written order.
            order.sort(key=lambda i: (branches[i].priority is None, branches[i].priority or 0))
        return cls(
            step=step.step,
            spec=spec,
            eval_mode=step.case_eval_mode,
            branches=branches,
            order=tuple(order),
        )

    def header(self) -> dict[str, Any]:
        """The options every `case.started` records."""
        spec = self.spec
        return {
            "eval_mode": self.eval_mode,
            "case_mode": spec.case_mode,
            "next_policy": spec.next_policy,
            "branch_order": spec.branch_order,
        }
