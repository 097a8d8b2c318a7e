"""Checks of the names templates read, before anything runs: E313 (a name nothing defines
where the template is rendered), W413 (a name only steps that cannot run before this
one save) and W414 (a `workload.<key>` the playbook's `workload` does not declare, when
it declares some: a typo, or a value that must be given at start).

What a template of a step sees (`noetl.engine.context`): the built-in names (`workload`,
`execution_id`, `step`, `secrets`, the helpers, Jinja's globals), the values steps save
(`result.as`, `collect.into`, a case branch's `set`), and, in some fields only, the
step's `bind` values, its loop element and `_loop`, and the tool's outcome (`this`,
`out`, ...). Names a template sets itself (`{% set %}`, a `for` target) are its own; a
name read only through `default` or an `is defined` test may be undefined on purpose
and is left alone.

A playbook in upstream NoETL's dialect is not checked: there every workload key and every
finished step's result is a name too, an undefined name reads as false in a condition,
and `ctx` variables are written along arcs and by tasks at run time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from difflib import get_close_matches
from functools import cache

from noetl.dsl.diagnostics import Diagnostic, Path, Severity, format_path
from noetl.dsl.locate import source_path, value_line
from noetl.dsl.messages import step_name, suggest
from noetl.dsl.model import UPSTREAM, Playbook, Result, Step, Tool
from noetl.dsl.run_order import RunOrder
from noetl.dsl.sandbox import LimitedEnvironment
from noetl.dsl.source import Source
from noetl.dsl.template_checks import Reads, literal_field
from noetl.dsl.templates import HELPERS, NameRead, workload_reads
from noetl.dsl.yaml_tree import YMap, line_at

__all__ = ["builtin_names", "name_checks"]

# What the tool's outcome adds where it is known (noetl.engine.retry.retry_names; `out`
# is the picked value of result.pick, collect.key, sink args and loop.until).
_OUTCOME = frozenset(
    {
        "this",
        "out",
        "result",
        "data",
        "status_code",
        "success",
        "error",
        "error_type",
        "retryable",
        "attempt",
        "max_attempts",
        "node_id",
        "sink_id",  # a sink's own retry_when / stop_when (noetl.sinks)
        "sink_kind",
    }
)
# The fields of a step that see its bind values, and its loop item (noetl.engine.flow:
# `when`, `bind` and `next` are rendered without them).
_BIND_FIELDS = frozenset({"tool", "loop", "result", "retry", "case"})
_ITEM_FIELDS = frozenset({"tool", "result", "retry"})
_NOT_RENDERED = frozenset({"desc"})
_UPSTREAM_NAMES = frozenset({"ctx", "iter", "job", "output", "event", "loop_index"})


@cache
def builtin_names() -> frozenset[str]:
    """The names every template sees: the engine's and Jinja's globals."""
    base = {"workload", "execution_id", "step", "secrets", *HELPERS}
    return frozenset(base | set(LimitedEnvironment().globals))


@dataclass(frozen=True, slots=True)
class _Read:
    path: Path
    text: str
    read: NameRead


class _Names:
    """The names of one playbook: who saves what, the graph's callers, the workload."""

    def __init__(self, playbook: Playbook, tree: YMap, source: Source, reads: Reads) -> None:
        self.playbook = playbook
        self.tree = tree
        self.source = source
        self.workload = set(playbook.workload)
        self.savers: dict[str, set[str]] = {}  # name -> the steps that save it
        self.anywhere: set[str] = set()  # saved by a workbook task no step calls
        self._saves()
        self.saved = set(self.savers) | self.anywhere
        self.order = RunOrder(playbook)
        self._saver_bits: dict[str, int] = {}
        self.grouped = self._group(reads)
        self.diags: list[Diagnostic] = []

    def _saves(self) -> None:
        tasks = {task.name: task.result for task in self.playbook.workbook}
        called: set[str] = set()
        for step in self.playbook.workflow:
            for name in _step_saves(step, tasks, called):
                self.savers.setdefault(name, set()).add(step.step)
        for name, result in tasks.items():
            if name not in called:
                self.anywhere.update(_result_saves(result))

    def runs_before(self, name: str, step: str) -> bool:
        """Whether a step that saves `name` is `step` or can run before it."""
        savers = self.savers[name]
        if step in savers:
            return True
        if name not in self._saver_bits:
            self._saver_bits[name] = self.order.bits(savers)
        return bool(self.order.before(step) & self._saver_bits[name])

    def check_workload_keys(self, base: Path) -> None:
        """W414 for each `workload.<key>` read that the playbook's workload lacks (only
        when it declares keys: a playbook without any takes all of them at start)."""
        if not self.workload:
            return
        seen: set[tuple[str, str]] = set()
        for item in self._reads(base):
            if (item.text, "") in seen:
                continue
            seen.add((item.text, ""))
            for read in workload_reads(item.text):
                if read.guarded or read.name in self.workload:
                    continue
                close = get_close_matches(read.name, sorted(self.workload), n=1)
                hint = f" (did you mean 'workload.{close[0]}'?)" if close else ""
                self._add(
                    "W414",
                    f"reads 'workload.{read.name}', which the playbook's workload does not "
                    f"declare{hint}: unless it is given at start (--set {read.name}=...), "
                    f"it is undefined",
                    _Read(item.path, item.text, NameRead(read.name, read.lineno, False)),
                    warning=True,
                )

    def check_step(self, index: int, step: Step) -> None:
        base: Path = ("workflow", index)
        self.check_workload_keys(base)
        for item in self._reads(base):
            local = _local_names(step, item.path[2:])
            if item.path[-2:] == ("spec", "script"):
                local |= self.workload  # rendered with the workload's keys bare (noetl.scripts)
            name = item.read.name
            if name in builtin_names() or name in local or name in self.anywhere:
                continue
            savers = self.savers.get(name)
            if savers is not None:
                if not item.read.guarded and not self.runs_before(name, step.step):
                    self._later(item, savers)
                continue
            if not item.read.guarded:
                scope = builtin_names() | local | self.saved
                self._undefined(item, _hint(name, step, self.workload, scope))

    def check_task(self, index: int, everything: frozenset[str]) -> None:
        """A workbook task renders in the context of the step that calls it: its names
        are checked against what any step could give it."""
        self.check_workload_keys(("workbook", index))
        for item in self._reads(("workbook", index)):
            name = item.read.name
            if item.read.guarded or name in everything:
                continue
            hint = _hint(name, None, self.workload, everything)
            self._undefined(item, hint)

    def _group(self, reads: Reads) -> dict[Path, list[_Read]]:
        """The reads of each step and workbook task, by its path, but for the text that
        is not rendered where the template checks found it."""
        grouped: dict[Path, list[_Read]] = {}
        for path, (text, found) in reads.items():
            if len(path) < 3 or self._skipped(path):
                continue
            items = grouped.setdefault(path[:2], [])
            items.extend(_Read(path, text, read) for read in found)
        return grouped

    def _reads(self, base: Path) -> list[_Read]:
        return self.grouped.get(base, [])

    def _skipped(self, path: Path) -> bool:
        """Text that is not rendered here: a description, code and SQL (taken literally),
        a pipeline's tasks (rendered by the worker, with the pipeline's own names)."""
        if path[-1] in _NOT_RENDERED or literal_field(self.tree, path):
            return True
        for at in range(len(path) - 2):
            if path[at] == "tool" and path[at + 1] == "spec" and path[at + 2] == "tasks":
                return True
        return False

    def _undefined(self, item: _Read, hint: str) -> None:
        self._add("E313", f"reads '{item.read.name}', which is not defined{hint}", item)

    def _later(self, item: _Read, savers: set[str]) -> None:
        names = sorted(savers)
        if len(names) == 1:
            who, none = f"step '{names[0]}'", "it cannot"
        else:
            who, none = f"steps {_quoted(names)}", "none of them can"
        self._add(
            "W413",
            f"reads '{item.read.name}', which only {who} saves, and {none} run before "
            f"this step: the name is undefined when it is read",
            item,
            warning=True,
        )

    def _add(self, code: str, message: str, item: _Read, *, warning: bool = False) -> None:
        shown = source_path(self.tree, item.path)
        key_line = line_at(self.tree, item.path) or 1
        field = format_path(shown[2:]) or format_path(shown)
        self.diags.append(
            Diagnostic(
                code=code,
                message=f"{field} {message}",
                file=self.source.name,
                line=value_line(self.source.lines, key_line, item.text, item.read.lineno),
                step=step_name(self.tree, item.path),
                path=shown,
                severity=Severity.WARNING if warning else Severity.ERROR,
            )
        )


def _quoted(names: Iterable[str]) -> str:
    items = [f"'{name}'" for name in names]
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else items[0]


def _result_saves(result: Result | None) -> list[str]:
    if result is None:
        return []
    names = [result.as_, result.collect.into if result.collect else None]
    return [name for name in names if name]


def _step_saves(step: Step, tasks: dict[str, Result | None], called: set[str]) -> list[str]:
    """The names a step saves: its result's, its case branches' (`set`, `result`), and the
    results of the workbook tasks its tools call (`called` collects those tasks)."""
    names = _result_saves(step.result)
    tools: list[Tool | None] = [step.tool]
    for branch in step.case or ():
        names.extend(branch.then.set or {})
        names.extend(_result_saves(branch.then.result))
        tools.append(branch.then.tool)
    for tool in tools:
        if tool is not None and tool.kind == "workbook":
            task = str(tool.spec.get("name"))
            called.add(task)
            names.extend(_result_saves(tasks.get(task)))
    return names


def _sees_outcome(rel: Path) -> bool:
    top = rel[:1]
    return top in (("result",), ("retry",), ("case",)) or rel[:2] in (
        ("tool", "retry"),
        ("tool", "result"),
        ("loop", "until"),
    )


def _sees_item(rel: Path) -> bool:
    return bool(rel) and (rel[0] in _ITEM_FIELDS or rel[:2] in (("loop", "key"), ("loop", "until")))


def _local_names(step: Step, rel: Path) -> set[str]:
    """The names a step's field at `rel` (its path below the step) sees besides the
    built-in and saved ones (noetl.engine.flow, loops, cases, retry)."""
    names: set[str] = set()
    if rel and rel[0] in _BIND_FIELDS:
        names.update(step.bind)
    if step.loop is not None and _sees_item(rel):
        names.update((step.loop.element, "_loop"))
    if _sees_outcome(rel):
        names.update(_OUTCOME)
    return names


def _hint(name: str, step: Step | None, workload: set[str], scope: Iterable[str]) -> str:
    """Why a name known elsewhere is not seen here, or a close name that is."""
    if step is not None and step.loop is not None and name in (step.loop.element, "_loop"):
        return (
            " here: the loop's element and _loop are seen by the step's tool, result, "
            "retry, loop.key and loop.until"
        )
    if step is not None and name in step.bind:
        return (
            " here: bind values are seen by the step's tool, loop, result, retry and "
            "case, not by its when, bind or next"
        )
    if name in _OUTCOME:
        return (
            " here: the tool's outcome is seen by result (and its sinks), retry, "
            "loop.until and case"
        )
    if name in workload:
        return f"; did you mean 'workload.{name}'?"
    if name in _UPSTREAM_NAMES:
        return (
            f": '{name}' is upstream NoETL's; here a value a step saves (result.as, a case "
            f"branch's set) is read by its own name"
        )
    return suggest(name, scope)


def name_checks(playbook: Playbook, tree: YMap, source: Source, reads: Reads) -> list[Diagnostic]:
    """E313 and W413 for every template of a valid playbook (none for upstream NoETL's
    dialect), from the names its templates read (`reads`, by `template_checks`)."""
    if tree.get("dialect") == UPSTREAM:
        return []
    names = _Names(playbook, tree, source, reads)
    everything = set(builtin_names()) | set(names.savers) | names.anywhere | _OUTCOME
    for index, step in enumerate(playbook.workflow):
        names.check_step(index, step)
        everything.update(step.bind)
        if step.loop is not None:
            everything.update((step.loop.element, "_loop"))
    for index in range(len(playbook.workbook)):
        names.check_task(index, frozenset(everything))
    return names.diags
