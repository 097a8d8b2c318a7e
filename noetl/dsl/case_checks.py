"""Checks of a step's `case` that would otherwise only fail (or do nothing) at run time.

Errors: E320 (`on_event` on a step that runs nothing), E321 (a `retry` action that has no
tool attempt to run again), E322 (a tool-less `result` or `sink` on entry, where there is
no output yet), E323 (actions of one branch that contradict each other), E324
(`retry_when` / `stop_when` in a `retry` action), E325 (a condition evaluated on entry
that reads the tool's outcome, so it never matches), E307 (two sinks of one branch with one
id), E308 / E103 (a `set` name that would hide a built-in or is not an identifier).
Warnings: W406 (`spec` without `case`), W407 (an exclusive branch that always matches
hides the ones after it), W408 (`priority` and `branch_order` disagree), W409 (`next` in
a branch of a `break_chain` step, never taken). See docs/dsl.md.
"""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from typing import Protocol

from noetl.dsl.diagnostics import Path
from noetl.dsl.model import CaseBranch, Step, StepSpec
from noetl.dsl.templates import free_names

RESERVED_NAMES = frozenset(
    {"workload", "step", "execution_id", "secrets", "this", "out", "_loop", "context"}
)
# What a case evaluated on the tool's outcome sees of it (noetl.engine.retry.retry_names);
# on entry the tool has not run, so a condition reading one of them never matches.
OUTCOME_NAMES = ("result", "this", "status_code", "error", "data", "success")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Reporter(Protocol):
    """Where diagnostics go (noetl.dsl.checks' checker). `lineno` is a line inside the
    value at `path` (a multi-line template), from 1."""

    def add(
        self,
        code: str,
        message: str,
        path: Path,
        *,
        warning: bool = False,
        lineno: int | None = None,
    ) -> None: ...


def check_case(
    report: Reporter, step: Step, base: Path, defined: frozenset[str] = frozenset()
) -> None:
    """Every check of the step's `case` and `spec`. `defined` holds the names the playbook
    saves into the context (`result.as`, `collect.into`, `set`): a condition may read one
    of those on entry even when it is also an outcome name."""
    if not step.case:
        if step.spec is not None:
            report.add(
                "W406",
                "spec (case options) has no effect on a step without case",
                (*base, "spec"),
                warning=True,
            )
        return
    spec = step.spec or StepSpec()
    if step.case_eval_mode == "on_event" and step.tool is None and step.loop is None:
        report.add(
            "E320",
            "eval_mode on_event evaluates the case after the step's tool, and this step "
            "runs none; use on_entry, or give the step a tool",
            (*base, "spec", "eval_mode"),
        )
    for index, branch in enumerate(step.case):
        then: Path = (*base, "case", index, "then")
        _actions(report, step, branch, then)
        _names(report, branch, then)
        _sink_ids(report, branch, then)
        _outcome_reads(report, step, branch, (*base, "case", index), defined | set(step.bind))
        if spec.next_policy == "break_chain" and branch.then.next is not None:
            report.add(
                "W409",
                "next_policy is break_chain, so this branch's next is never taken",
                (*then, "next"),
                warning=True,
            )
    _order(report, step, spec, base)


def _actions(report: Reporter, step: Step, branch: CaseBranch, then: Path) -> None:
    actions = branch.then
    fail = actions.fail is not None and actions.fail is not False
    present = {"fail": fail, "skip": bool(actions.skip), "retry": actions.retry is not None}
    verdicts = [name for name, there in present.items() if there]
    if len(verdicts) > 1:
        report.add(
            "E323",
            f"a branch ends the step one way: it has both {verdicts[0]} and {verdicts[1]}",
            (*then, verdicts[1]),
        )
    if actions.retry is not None:
        _retry(report, step, branch, then)
    if actions.tool is None and step.case_eval_mode == "on_entry":
        if step.tool is not None:
            why = "the step's tool has not run yet); give the branch a tool, or drop "
            fix = "spec.eval_mode: on_entry"
        else:
            why = "the step runs no tool); give the branch a tool"
            fix = ", or use eval_mode: on_event for the loop's output" if step.loop else ""
        for key, given in (("result", actions.result is not None), ("sink", bool(actions.sink))):
            if given:
                report.add(
                    "E322",
                    f"a branch {key} without a tool has no output to use on entry ({why}{fix}",
                    (*then, key),
                )


def _outcome_reads(
    report: Reporter, step: Step, branch: CaseBranch, path: Path, defined: AbstractSet[str]
) -> None:
    """E325: a condition evaluated on entry that reads the tool's outcome (`result.n`, `this`,
    `status_code`, ...), which does not exist yet: the name is undefined, the condition
    cannot be evaluated, and the branch silently never matches."""
    if step.case_eval_mode != "on_entry" or not isinstance(branch.when, str):
        return
    for name, lineno in free_names(branch.when):
        if name not in OUTCOME_NAMES or name in defined:
            continue
        if step.tool is not None:
            why = (
                "but spec.eval_mode: on_entry evaluates the case before the tool runs, so it "
                "never matches; drop eval_mode: on_entry to evaluate it on the tool's outcome"
            )
        else:
            why = (
                "but the step runs no tool, so its case is evaluated on entry and never "
                "matches; give the step a tool, or read what an earlier step saved "
                "(result.as)"
            )
        report.add(
            "E325",
            f"when reads '{name}', the tool's outcome, {why}",
            (*path, "when"),
            lineno=lineno,
        )
        return


def _retry(report: Reporter, step: Step, branch: CaseBranch, then: Path) -> None:
    retry = branch.then.retry
    assert retry is not None
    path: Path = (*then, "retry")
    if step.tool is None:
        report.add("E321", "a case retry runs the step's tool again, and it has none", path)
    elif step.loop is not None:
        report.add(
            "E321",
            "a case retry cannot run a loop again; put retry on the step's tool for its items",
            path,
        )
    elif step.case_eval_mode == "on_entry":
        report.add(
            "E321",
            "a case retry runs the step's tool again, which has not run yet on entry; drop "
            "spec.eval_mode: on_entry",
            path,
        )
    if branch.then.next is not None:
        report.add(
            "E323",
            "a branch that retries does not route: the step's tool runs again and the case "
            "is evaluated on its outcome; route from the branch that matches that outcome",
            (*then, "next"),
        )
    for key in ("retry_when", "stop_when"):
        if getattr(retry, key) is not None:
            report.add(
                "E324",
                f"{key} does nothing in a case retry: the branch's when decides",
                (*path, key),
            )


def _names(report: Reporter, branch: CaseBranch, then: Path) -> None:
    for key in branch.then.set or {}:
        if not _IDENTIFIER.match(key):
            report.add(
                "E103",
                f"set name '{key}' must be an identifier (letters, digits and underscores, "
                f"not starting with a digit)",
                (*then, "set", key),
            )
        elif key in RESERVED_NAMES:
            report.add("E308", f"set name '{key}' would hide a built-in name", (*then, "set", key))


def _sink_ids(report: Reporter, branch: CaseBranch, then: Path) -> None:
    """A branch's `result.sink` and `sink` run as one list (ids by position in it)."""
    written = branch.then.result.sink if branch.then.result else []
    extra = branch.then.sink or []
    if not written or not extra:
        return  # one list: checked with the other sinks
    seen = {sink.id or f"{sink.kind}_{i}" for i, sink in enumerate(written)}
    for j, sink in enumerate(extra):
        sink_id = sink.id or f"{sink.kind}_{len(written) + j}"
        if sink_id in seen:
            report.add(
                "E307",
                f"sink id '{sink_id}' is used twice in this branch (result.sink and sink)",
                (*then, "sink", j),
            )
        seen.add(sink_id)


def _order(report: Reporter, step: Step, spec: StepSpec, base: Path) -> None:
    branches = step.case or []
    with_priority = [i for i, b in enumerate(branches) if b.priority is not None]
    if spec.branch_order == "source" and with_priority:
        report.add(
            "W408",
            "priority is ignored unless spec.branch_order is priority",
            (*base, "case", with_priority[0], "priority"),
            warning=True,
        )
    if spec.branch_order == "priority" and not with_priority:
        report.add(
            "W408",
            "branch_order is priority but no branch has a priority (written order applies)",
            (*base, "spec", "branch_order"),
            warning=True,
        )
    if spec.case_mode != "exclusive":
        return
    order = list(range(len(branches)))
    if spec.branch_order == "priority":
        order.sort(key=lambda i: (branches[i].priority is None, branches[i].priority or 0))
    for position, index in enumerate(order[:-1]):
        if branches[index].when is True:
            hidden = order[position + 1]
            report.add(
                "W407",
                f"in exclusive mode branch {index} always matches, so the branches after it "
                f"never act",
                (*base, "case", hidden, "when"),
                warning=True,
            )
            break
