"""Checks that need the whole document: names, references, tool kinds, sinks, policy, and
the pip extras the tools, sinks and triggers need (E340, `noetl.extras`).

The templates are checked in `noetl.dsl.template_checks`, a step's `case` in
`noetl.dsl.case_checks` and the shape of the step graph in `noetl.dsl.graph_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from noetl.dsl.case_checks import RESERVED_NAMES, check_case
from noetl.dsl.code_checks import (
    python_syntax,
    python_template,
    rendered_python_syntax,
    sql_template,
)
from noetl.dsl.diagnostics import Diagnostic, Path, Severity, format_path, has_errors
from noetl.dsl.graph_checks import graph_warnings
from noetl.dsl.kinds import SINK_SPECS, TOOL_SPECS, PipelineSpec
from noetl.dsl.locate import source_path, value_line
from noetl.dsl.messages import step_name, suggest, translate_errors
from noetl.dsl.model import (
    UPSTREAM,
    Playbook,
    Policy,
    Result,
    Sink,
    Step,
    Tool,
    WorkbookTask,
    pipeline_task_tool,
)
from noetl.dsl.retry_checks import check_retries
from noetl.dsl.rewrite import ShapeError
from noetl.dsl.source import Source
from noetl.dsl.template_checks import strings
from noetl.dsl.templates import is_template
from noetl.dsl.yaml_tree import YMap, line_at
from noetl.extras import SINK_EXTRAS, TOOL_EXTRAS, installed, needs_extra

_BOOLEAN_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "0", "1", ""})
_CONDITION_KEYS = frozenset({"when", "until", "retry_when", "stop_when"})


def _step_of(tree: YMap, path: Path) -> str | None:
    return step_name(tree, path)


@dataclass(frozen=True)
class _Parts:
    """What the checks look at: the steps and tasks that validated, with their positions.

    For a valid document that is all of it; when the document as a whole does not
    validate, it is the steps, tasks and policy that validate on their own, so one typo
    does not hide the other errors. Names always come from the whole document.
    """

    steps: list[tuple[int, Step]]
    tasks: list[tuple[int, WorkbookTask]]
    policy: Policy | None
    step_names: list[tuple[int, str]]
    task_names: list[tuple[int, str]]
    playbook: Playbook | None = None


class _Checker:
    def __init__(self, parts: _Parts, tree: YMap, source: Source) -> None:
        self.parts = parts
        self.tree = tree
        self.source = source
        self.diags: list[Diagnostic] = []
        self.names = [name for _, name in parts.step_names]
        self.known = frozenset(self.names)  # membership without a scan per reference
        self.tasks = [name for _, name in parts.task_names]
        self.saved = _saved_names(parts)
        self.upstream = tree.get("dialect") == UPSTREAM

    def add(
        self,
        code: str,
        message: str,
        path: Path,
        *,
        warning: bool = False,
        lineno: int | None = None,
    ) -> None:
        line = line_at(self.tree, path)
        if lineno is not None and line is not None:
            text = self.tree_at(path)
            line = value_line(
                self.source.lines, line, text if isinstance(text, str) else "", lineno
            )
        self.diags.append(
            Diagnostic(
                code=code,
                message=message,
                file=self.source.name,
                line=line,
                step=_step_of(self.tree, path),
                path=source_path(self.tree, path),
                severity=Severity.WARNING if warning else Severity.ERROR,
            )
        )

    def run(self, *, graph: bool) -> list[Diagnostic]:
        self.duplicates()
        for index, step in self.parts.steps:
            self.step(step, ("workflow", index))
        for index, task in self.parts.tasks:
            base: Path = ("workbook", index)
            self.tool(task.tool, (*base, "tool"))
            if task.result is not None:
                self.result(task.result, (*base, "result"))
        if self.parts.policy is not None:
            self.policy(self.parts.policy)
        if self.parts.playbook is not None:
            for index, trigger in enumerate(self.parts.playbook.triggers):
                if trigger.nats is not None:
                    what = f"the nats trigger '{trigger.name}'"
                    self.extra("nats", what, ("triggers", index, "nats"))
        if graph and self.parts.playbook is not None and not has_errors(self.diags):
            graph_warnings(self, self.parts.playbook)
        if self.tree.get("apiVersion") is None:
            self.add(
                "W402", "apiVersion is missing; add 'apiVersion: noetl.io/v2'", (), warning=True
            )
        return self.diags

    def duplicates(self) -> None:
        for label, names, section, key in (
            ("step", self.parts.step_names, "workflow", "step"),
            ("workbook task", self.parts.task_names, "workbook", "name"),
        ):
            first: dict[str, int] = {}
            for index, name in names:
                if name in first:
                    line = line_at(self.tree, (section, first[name], key))
                    self.add(
                        "E301",
                        f"{label} name '{name}' is used twice (first on line {line})",
                        (section, index, key),
                    )
                else:
                    first[name] = index

    def target(self, name: str, path: Path, what: str) -> None:
        if name not in self.known:
            self.add(
                "E302",
                f"{what} names step '{name}', which does not exist{suggest(name, self.names)}",
                path,
            )

    def step(self, step: Step, base: Path) -> None:
        if step.next is not None:
            for j, edge in enumerate(step.next.to):
                self.target(edge.step, (*base, "next", "to", j, "step"), "next")
        if step.compensate is not None:
            self.target(step.compensate, (*base, "compensate"), "compensate")
        self.case(step, base)
        check_retries(self, step, base, self.parts.playbook)
        if step.tool is not None:
            self.tool(step.tool, (*base, "tool"))
        if step.result is not None:
            self.result(step.result, (*base, "result"))
        if step.loop is not None and step.loop.element in RESERVED_NAMES:
            self.add(
                "E308",
                f"loop element '{step.loop.element}' would hide a built-in name; pick another",
                (*base, "loop", "element"),
            )
        self.constant_conditions(step, base)

    def case(self, step: Step, base: Path) -> None:
        for b, branch in enumerate(step.case or []):
            then = (*base, "case", b, "then")
            if branch.then.next is not None:
                for j, edge in enumerate(branch.then.next.to):
                    self.target(edge.step, (*then, "next", "to", j, "step"), "case next")
            if branch.then.tool is not None:
                self.tool(branch.then.tool, (*then, "tool"))
            if branch.then.result is not None:
                self.result(branch.then.result, (*then, "result"))
            if branch.then.sink:
                self.sinks(branch.then.sink, (*then, "sink"))
        check_case(self, step, base, self.saved)

    def tool(self, tool: Tool, path: Path) -> None:
        self.extra(TOOL_EXTRAS.get(tool.kind), f"the {tool.kind} tool", (*path, "kind"))
        model = TOOL_SPECS[tool.kind]  # normalization rejected unknown kinds
        try:
            spec = model.model_validate(tool.spec)
        except ValidationError as exc:
            self.diags.extend(
                translate_errors(
                    exc.errors(),
                    self.tree,
                    self.source.name,
                    base=(*path, "spec"),
                    model=model,
                    context=f"{tool.kind} tool",
                )
            )
            return
        if isinstance(spec, PipelineSpec):
            self.pipeline(spec, path)
            return
        if tool.kind == "workbook" and getattr(spec, "name", None) not in self.tasks:
            name = getattr(spec, "name", "")
            self.add(
                "E306",
                f"workbook task '{name}' does not exist{suggest(name, self.tasks)}",
                (*path, "spec", "name"),
            )
        code = getattr(spec, "code", None)
        if tool.kind == "python" and isinstance(code, str):
            toplevel = getattr(spec, "style", "main") == "toplevel"
            self.python_code(code, (*path, "spec", "code"), toplevel=toplevel)
        query = getattr(spec, "query", None)
        if tool.kind in ("postgres", "duckdb") and isinstance(query, str) and not self.upstream:
            line = sql_template(query)
            if line is not None:
                field = self.field(path, "query")
                self.add(
                    "W412",
                    f"{field} holds a template, but SQL is taken literally, never rendered; pass "
                    f"values as query parameters from tool.args",
                    (*path, "spec", "query"),
                    warning=True,
                    lineno=line,
                )

    def extra(self, extra: str | None, what: str, path: Path) -> None:
        """E340: what the step uses needs a pip extra that is not installed here."""
        if extra is not None and not installed(extra):
            self.add("E340", needs_extra(f"uses {what}", extra), path)

    def pipeline(self, spec: PipelineSpec, path: Path) -> None:
        """Each task of a pipeline checked as the tool it is."""
        for index, task in enumerate(spec.tasks):
            where = (*path, "spec", "tasks", index, "tool")
            try:
                tool = pipeline_task_tool(task.tool)
            except ShapeError as exc:
                self.add(exc.code, exc.message, (*where, *exc.path))
                continue
            except ValidationError as exc:
                self.diags.extend(
                    translate_errors(
                        exc.errors(), self.tree, self.source.name, base=where, model=Tool
                    )
                )
                continue
            self.tool(tool, where)

    def field(self, tool_path: Path, key: str) -> str:
        """How a message names a tool's spec field: the path the file has below the step
        (`tool.spec.code`, `tool.code`, `case[0].then.tool.spec.code`)."""
        return format_path(source_path(self.tree, (*tool_path, "spec", key))[2:])

    def python_code(self, code: str, path: Path, *, toplevel: bool = False) -> None:
        """E312 for a syntax error in inline code, at the line of the offending code line;
        W412 for a template written into it (code is never rendered, except in an
        upstream NoETL playbook, whose code is a template checked as it will run)."""
        field = self.field(path[:-2], "code")
        if self.upstream:
            problem = rendered_python_syntax(code)
        else:
            problem = python_syntax(code, toplevel=toplevel)
        if problem is not None:
            message = f"python syntax error in {field}: {problem.message}"
            self.add("E312", message, path, lineno=problem.lineno)
            return
        if self.upstream:
            return
        line = python_template(code)
        if line is not None:
            self.add(
                "W412",
                f"{field} holds '{{{{', but code is taken literally, never rendered as a "
                f"template; pass values in tool.args and read them from args",
                path,
                warning=True,
                lineno=line,
            )

    def result(self, result: Result, path: Path) -> None:
        for name, key in (
            (result.as_, "as"),
            (result.collect.into if result.collect else None, "collect"),
        ):
            if name in RESERVED_NAMES:
                self.add("E308", f"result {key} '{name}' would hide a built-in name", (*path, key))
        self.sinks(result.sink, (*path, "sink"))

    def sinks(self, sinks: list[Sink], path: Path) -> None:
        ids: set[str] = set()
        for index, sink in enumerate(sinks):
            sink_path = (*path, index)
            self.extra(SINK_EXTRAS.get(sink.kind), f"the {sink.kind} sink", (*sink_path, "kind"))
            model = SINK_SPECS[sink.kind]  # normalization rejected unknown kinds
            try:
                model.model_validate(sink.spec)
            except ValidationError as exc:
                self.diags.extend(
                    translate_errors(
                        exc.errors(),
                        self.tree,
                        self.source.name,
                        base=(*sink_path, "spec"),
                        model=model,
                        context=f"{sink.kind} sink",
                    )
                )
            sink_id = sink.id or f"{sink.kind}_{index}"
            if sink_id in ids:
                self.add(
                    "E307", f"sink id '{sink_id}' is used twice in this step", (*sink_path, "id")
                )
            ids.add(sink_id)

    def policy(self, policy: Policy) -> None:
        target = policy.route_edge_target
        if target is not None:
            self.target(target, ("policy", "on_step_fail"), "policy.on_step_fail route_edge")
        if (
            policy.rollback == "on_fail"
            and self.parts.playbook is not None
            and not any(s.compensate for s in self.parts.playbook.workflow)
        ):
            self.add(
                "W405",
                "policy.rollback is on_fail but no step declares 'compensate'",
                ("policy", "rollback"),
                warning=True,
            )

    def constant_conditions(self, step: Step, base: Path) -> None:
        for path, text in strings(self.tree_at(base), base):
            key = next((p for p in reversed(path) if isinstance(p, str)), "")
            constant = not is_template(text) and text.strip().lower() not in _BOOLEAN_WORDS
            if key in _CONDITION_KEYS and constant:
                self.add(
                    "W404",
                    f"'{key}' is the constant text {text!r}, which is always true; "
                    f'write it as a template: "{{{{ {text} }}}}"',
                    path,
                    warning=True,
                )

    def tree_at(self, path: Path) -> Any:
        node: Any = self.tree
        for part in path:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return None
        return node


def _saved_names(parts: _Parts) -> frozenset[str]:
    """The names steps, tasks and case branches save into the context (`result.as`,
    `collect.into`, `set`)."""
    names: set[str] = set()
    results: list[Result | None] = [task.result for _, task in parts.tasks]
    for _, step in parts.steps:
        results.append(step.result)
        for branch in step.case or ():
            names.update(branch.then.set or {})
            results.append(branch.then.result)
    for result in results:
        if result is not None:
            names.update(n for n in (result.as_, result.collect and result.collect.into) if n)
    return frozenset(names)


def semantic_checks(
    playbook: Playbook, tree: YMap, source: Source, *, graph: bool = True
) -> list[Diagnostic]:
    """Every check that needs the validated model; `graph` adds the graph warnings (they
    are noise when earlier passes already dropped keys with errors)."""
    parts = _Parts(
        steps=list(enumerate(playbook.workflow)),
        tasks=list(enumerate(playbook.workbook)),
        policy=playbook.policy,
        step_names=[(i, s.step) for i, s in enumerate(playbook.workflow)],
        task_names=[(i, t.name) for i, t in enumerate(playbook.workbook)],
        playbook=playbook,
    )
    return _Checker(parts, tree, source).run(graph=graph)


def partial_checks(tree: YMap, source: Source) -> list[Diagnostic]:
    """The semantic checks of the parts that validate, for a document that does not."""
    parts = _Parts(
        steps=_valid_items(tree.get("workflow"), Step),
        tasks=_valid_items(tree.get("workbook"), WorkbookTask),
        policy=_valid_or_none(tree.get("policy", {}), Policy),
        step_names=_raw_names(tree.get("workflow"), "step"),
        task_names=_raw_names(tree.get("workbook"), "name"),
    )
    return _Checker(parts, tree, source).run(graph=False)


_M = TypeVar("_M", bound=BaseModel)


def _valid_or_none(data: Any, model: type[_M]) -> _M | None:
    try:
        return model.model_validate(data)
    except ValidationError:
        return None


def _valid_items(items: Any, model: type[_M]) -> list[tuple[int, _M]]:
    """Items that validate, each without the keys it has errors in (already reported)."""
    if not isinstance(items, list):
        return []
    out = []
    for index, item in enumerate(items):
        try:
            out.append((index, model.model_validate(item)))
            continue
        except ValidationError as exc:
            bad = {e["loc"][0] for e in exc.errors() if e["loc"]}
        if isinstance(item, dict) and bad & set(item):
            valid = _valid_or_none({k: v for k, v in item.items() if k not in bad}, model)
            if valid is not None:
                out.append((index, valid))
    return out


def _raw_names(items: Any, key: str) -> list[tuple[int, str]]:
    if not isinstance(items, list):
        return []
    return [
        (i, item[key])
        for i, item in enumerate(items)
        if isinstance(item, dict) and isinstance(item.get(key), str)
    ]
