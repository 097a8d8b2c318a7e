"""Checks of `retry` blocks that would otherwise do nothing, or fail, at run time.

E342: `scope: chain` where there is no chain of tasks to run again: a step has one when
its tool is a `pipeline` (or calls a workbook task whose tool is one), or when its `case`,
evaluated on entry, has a branch that runs a tool before the step's own (not a loop). Warnings: W420
(`status_codes` without `status_code` in `on`), W421 (`exceptions` without `exception` in
`on`): the list is never read. An unknown trigger in `on` is a schema error. See
docs/dsl.md, section 9.
"""

from __future__ import annotations

from noetl.dsl.case_checks import Reporter
from noetl.dsl.diagnostics import Path
from noetl.dsl.model import Playbook, RetryPolicy, Step, Tool

__all__ = ["check_retries"]

PIPELINE = "pipeline"


def check_retries(report: Reporter, step: Step, base: Path, playbook: Playbook | None) -> None:
    """Every `retry` block of the step: on it, on its tool, on its case branches' tools and
    on its sinks."""
    chained = _is_chain(step.tool, playbook) or _case_chain(step)
    if step.retry is not None:
        _block(report, step.retry, (*base, "retry"), chain_ok=chained)
    if step.tool is not None and step.tool.retry is not None:
        _block(report, step.tool.retry, (*base, "tool", "retry"), chain_ok=chained)
    for b, branch in enumerate(step.case or ()):
        tool = branch.then.tool
        if tool is not None and tool.retry is not None:
            _block(report, tool.retry, (*base, "case", b, "then", "tool", "retry"), chain_ok=False)


def _is_chain(tool: Tool | None, playbook: Playbook | None) -> bool:
    if tool is None:
        return False
    if tool.kind == PIPELINE:
        return True
    if tool.kind == "workbook":
        if playbook is None:
            return True  # a document that does not validate: its workbook is not known
        try:
            return playbook.task(str(tool.spec.get("name"))).tool.kind == PIPELINE
        except KeyError:
            return False
    return False


def _case_chain(step: Step) -> bool:
    return (
        step.tool is not None
        and step.loop is None
        and step.case_eval_mode == "on_entry"
        and any(branch.then.tool is not None for branch in step.case or ())
    )


def _block(report: Reporter, block: RetryPolicy, path: Path, *, chain_ok: bool) -> None:
    if block.scope == "chain" and not chain_ok:
        report.add(
            "E342",
            "retry scope 'chain' runs a chain of tasks again from its first one, and this "
            "tool is not a chain: use it with a pipeline tool (tool.kind: pipeline) or on a "
            "step whose case, evaluated on entry, runs a tool first; or write scope: tool",
            (*path, "scope"),
        )
    triggers = block.on or ()
    if block.status_codes is not None and "status_code" not in triggers:
        report.add(
            "W420",
            "status_codes is read only with status_code in `on` (on: [status_code])",
            (*path, "status_codes"),
            warning=True,
        )
    if block.exceptions is not None and "exception" not in triggers:
        report.add(
            "W421",
            "exceptions is read only with exception in `on` (on: [exception])",
            (*path, "exceptions"),
            warning=True,
        )
