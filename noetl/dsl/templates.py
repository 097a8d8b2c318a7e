"""Template syntax: the sandboxed Jinja2 environment and static checks of templates.

`TemplateEnvironment` is the one Jinja2 configuration every template is parsed and rendered
with; rendering with its step and size limits (`noetl.dsl.sandbox`) builds on it. This
module only parses, so a playbook's templates are checked when it is validated, before
anything runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from inspect import getattr_static
from typing import Any

from jinja2 import TemplateSyntaxError, meta, nodes, pass_environment
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

HELPERS = ("done", "ok", "fail", "running", "loop_done", "all_done", "any_done")
LIST_HELPERS = frozenset({"all_done", "any_done"})


class TemplateEnvironment(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox, reading data before Python attributes.

    `a.b` on a mapping is its key `b` when it has one: `workload.items`, `result.keys`,
    `row.values` name data, not the methods of `dict` (Jinja itself prefers the attribute,
    so the most common name of a collection would be a bound method). Without such a key,
    the attribute is looked up as Jinja does (`d.get('k')` still calls the method), and
    `x | attr('items')` always reaches the attribute.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(autoescape=False, keep_trailing_newline=True, **options)
        self.filters["attr"] = _attr

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except (LookupError, TypeError):
                pass  # no such key: the attribute, or undefined
        return super().getattr(obj, attribute)


@pass_environment
def _attr(environment: SandboxedEnvironment, obj: Any, name: str) -> Any:
    """`x | attr('items')`: the attribute, never a key (Jinja's own looks up a key first
    here, since `getattr` does)."""
    try:
        getattr_static(obj, name)
    except AttributeError:
        if not hasattr(obj, name):
            return environment.undefined(obj=obj, name=name)
    # The sandbox's lookup (with its safety checks), which prefers the attribute.
    return SandboxedEnvironment.getattr(environment, obj, name)


def make_environment() -> TemplateEnvironment:
    """The environment templates are parsed with (and, with limits, rendered with)."""
    return TemplateEnvironment()


_ENV = make_environment()


def is_template(value: Any) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value or "{#" in value)


@dataclass(frozen=True, slots=True)
class TemplateProblem:
    message: str
    lineno: int  # 1-based line inside the template text


@lru_cache(maxsize=4096)
def _parse(text: str) -> nodes.Template | TemplateProblem:
    """The syntax tree of a template, or its syntax problem. Cached: a playbook of many
    steps repeats the same templates (`{{ v }}`), and each is checked more than once."""
    try:
        return _ENV.parse(text)
    except TemplateSyntaxError as exc:
        return TemplateProblem(message=exc.message or "syntax error", lineno=exc.lineno or 1)


def check_syntax(text: str) -> TemplateProblem | None:
    """Parse a template; return the syntax problem, if any."""
    parsed = _parse(text)
    return parsed if isinstance(parsed, TemplateProblem) else None


@dataclass(frozen=True, slots=True)
class StepReference:
    """A step named in a template: `done('x')`, `all_done(['a','b'])`, `step.x.status`."""

    name: str
    via: str
    lineno: int


def step_references(text: str) -> list[StepReference]:
    """The step names a (syntactically valid) template refers to by constant."""
    tree = _parse(text)
    return [] if isinstance(tree, TemplateProblem) else list(_walk(tree))


# Nodes that give a template names of its own; without them every name it loads is read
# from the context, and the code generator's scoping need not run.
_SCOPING = (
    nodes.For,
    nodes.Assign,
    nodes.AssignBlock,
    nodes.Macro,
    nodes.CallBlock,
    nodes.With,
    nodes.Import,
    nodes.FromImport,
    nodes.Block,
    nodes.FilterBlock,
    nodes.Scope,
    nodes.OverlayScope,
)


def _undeclared(tree: nodes.Template) -> set[str]:
    """`meta.find_undeclared_variables` without its optimizer, which folds constants into
    the tree it is given (`['a', 'b']` becomes one constant) and would change the cached
    tree the other checks read."""
    codegen = meta.TrackingCodeGenerator(_ENV)
    codegen.optimizer = None
    codegen.visit(tree)
    return codegen.undeclared_identifiers


@dataclass(frozen=True, slots=True)
class NameRead:
    """A name a template reads from its context: the line (inside the template) of its
    first read, and whether the template allows it to be undefined (`x | default(...)`,
    `x is defined` anywhere in the template)."""

    name: str
    lineno: int
    guarded: bool


_GUARD_FILTERS = frozenset({"default", "d"})
_GUARD_TESTS = frozenset({"defined", "undefined"})


def _scan(tree: nodes.Template) -> tuple[dict[str, int], set[str], bool]:
    """One walk of the tree: each loaded name with the line of its first load, the names
    a guard (`default`, `is defined`) applies to, and whether the template declares names
    of its own."""
    loads: dict[str, int] = {}
    guarded: set[str] = set()
    scoping = False
    stack: list[nodes.Node] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, nodes.Name):
            if node.ctx == "load" and node.name not in loads:
                loads[node.name] = node.lineno
        elif isinstance(node, nodes.Filter | nodes.Test):
            names = _GUARD_FILTERS if isinstance(node, nodes.Filter) else _GUARD_TESTS
            if node.name in names and isinstance(node.node, nodes.Name):
                guarded.add(node.node.name)
        elif isinstance(node, _SCOPING):
            scoping = True
        stack.extend(reversed(list(node.iter_child_nodes())))
    return loads, guarded, scoping


def free_names(text: str) -> list[tuple[str, int]]:
    """The names a (syntactically valid) template reads from its context, each once with
    the line (inside the template) of its first read; names it sets itself are left out."""
    return [(read.name, read.lineno) for read in name_reads(text)]


def name_reads(text: str) -> tuple[NameRead, ...]:
    """`free_names` of a (syntactically valid) template, each with whether it is guarded."""
    tree = _parse(text)
    if isinstance(tree, TemplateProblem):
        return ()
    loads, guarded, scoping = _scan(tree)
    if scoping:  # only then may a loaded name be the template's own
        undeclared = _undeclared(tree)
        loads = {name: line for name, line in loads.items() if name in undeclared}
    return tuple(NameRead(name, line, name in guarded) for name, line in loads.items())


@lru_cache(maxsize=4096)
def workload_reads(text: str) -> tuple[NameRead, ...]:
    """The workload keys a (syntactically valid) template reads (`workload.key`,
    `workload['key']`), each once with the line of its first read and whether a guard
    (`default`, `is defined`) applies to that read."""
    tree = _parse(text)
    if isinstance(tree, TemplateProblem):
        return ()
    loads: dict[str, int] = {}
    guarded: set[str] = set()
    stack: list[nodes.Node] = [tree]
    while stack:
        node = stack.pop()
        key = _workload_key(node)
        if key is not None:
            loads.setdefault(key, node.lineno)
        elif isinstance(node, nodes.Filter | nodes.Test):
            names = _GUARD_FILTERS if isinstance(node, nodes.Filter) else _GUARD_TESTS
            inner = _workload_key(node.node) if node.node is not None else None
            if node.name in names and inner is not None:
                guarded.add(inner)
        stack.extend(reversed(list(node.iter_child_nodes())))
    return tuple(NameRead(key, line, key in guarded) for key, line in loads.items())


def _workload_key(node: nodes.Node) -> str | None:
    if isinstance(node, nodes.Getattr):
        target, key = node.node, node.attr
    elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        target, key = node.node, node.arg.value
    else:
        return None
    if isinstance(target, nodes.Name) and target.name == "workload" and isinstance(key, str):
        return key
    return None


def helper_call(text: str) -> tuple[str, str] | None:
    """`(helper, name)` when the template is exactly one helper called with one step name,
    such as `{{ fail('charge') }}`; None otherwise."""
    tree = _parse(text.strip())
    if isinstance(tree, TemplateProblem) or len(tree.body) != 1:
        return None
    output = tree.body[0]
    if not isinstance(output, nodes.Output) or len(output.nodes) != 1:
        return None
    call = output.nodes[0]
    if (
        isinstance(call, nodes.Call)
        and isinstance(call.node, nodes.Name)
        and call.node.name in HELPERS
        and len(call.args) == 1
        and not call.kwargs
        and isinstance(call.args[0], nodes.Const)
        and isinstance(call.args[0].value, str)
    ):
        return call.node.name, call.args[0].value
    return None


def _walk(tree: nodes.Node) -> Iterator[StepReference]:
    for call in tree.find_all(nodes.Call):
        target = call.node
        if not isinstance(target, nodes.Name) or target.name not in HELPERS:
            continue
        for arg in call.args[:1]:
            yield from _constant_names(arg, f"{target.name}()", call.lineno)
    for attr in tree.find_all(nodes.Getattr):
        if isinstance(attr.node, nodes.Name) and attr.node.name == "step":
            yield StepReference(attr.attr, "step.<name>", attr.lineno)
    for item in tree.find_all(nodes.Getitem):
        if (
            isinstance(item.node, nodes.Name)
            and item.node.name == "step"
            and isinstance(item.arg, nodes.Const)
            and isinstance(item.arg.value, str)
        ):
            yield StepReference(item.arg.value, "step[...]", item.lineno)


def _constant_names(arg: nodes.Node, via: str, lineno: int) -> Iterator[StepReference]:
    if isinstance(arg, nodes.Const) and isinstance(arg.value, str):
        yield StepReference(arg.value, via, lineno)
    elif isinstance(arg, nodes.List | nodes.Tuple):
        for item in arg.items:
            if isinstance(item, nodes.Const) and isinstance(item.value, str):
                yield StepReference(item.value, via, lineno)
