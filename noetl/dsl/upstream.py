"""Upstream NoETL's current playbook dialect: recognised per file, read into the same model.

NoETL's users write playbooks in upstream NoETL's dialect (`tool.input`, `auth:`,
`command:` SQL, top-level python code, `next: {spec, arcs}`). A file is read in that
dialect when it holds at least one construct only upstream has (`detect`); it is then
rewritten into the canonical tree (`rewrite`, tools in `noetl.dsl.upstream_tools`) and
marked `dialect: upstream`, which keeps upstream's behaviour where it differs: bare
workload names and step results by step name in templates, code and SQL rendered as
templates, python code run top to bottom, execution variables (`ctx`, written by a step's
or an arc's `set:`, see `noetl.engine.variables`) and a loop iteration's `iter` (see
docs/dsl.md, "Upstream NoETL playbooks").

Tool pipelines and task policy rules are rewritten into a `pipeline` tool
(`noetl.dsl.upstream_pipeline`). Constructs this engine cannot run yet (cursor loops,
step admission rules, ...) and tool kinds it does not have (`snowflake`, `container`,
...) are found by `unsupported` and reported as ONE diagnostic (E330, or E331 when only
tool kinds are missing) rather than one error per unknown key.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from noetl.dsl.diagnostics import Diagnostic, Path, Severity
from noetl.dsl.locate import set_origin
from noetl.dsl.model import NAME_PATTERN, UPSTREAM
from noetl.dsl.rewrite import ShapeError, new_map, new_seq, within
from noetl.dsl.templates import free_names, is_template
from noetl.dsl.upstream_pipeline import is_pipeline, pipeline_tasks, rewrite_pipeline
from noetl.dsl.upstream_tools import (
    UPSTREAM_TOOL_KEYS,
    Finding,
    describe_kind,
    rewrite_tool,
    tool_findings,
    unavailable,
)
from noetl.dsl.yaml_tree import YMap, YSeq, line_at

__all__ = ["Evidence", "detect", "rewrite", "unsupported", "unsupported_diagnostic"]

# Root and metadata keys upstream writes that this engine reads and ignores.
IGNORED_ROOT_KEYS = ("keychain", "executor", "tracing")
IGNORED_METADATA_KEYS = ("tags", "exposes_as_mcp")
_STEP_SIGNS = ("set", "output", "input")
_RETRY_SIGNS = ("retry_on", "retry_on_status", "backoff_seconds")
# Template names that hold what this engine does not provide yet.
_UNSUPPORTED_NAMES = {"keychain": "`keychain` values in templates"}
_NAME = re.compile(NAME_PATTERN)


@dataclass(frozen=True, slots=True)
class Evidence:
    """The first construct that marks a file as upstream's dialect, and where it is."""

    what: str
    path: Path


# --- detection ---------------------------------------------------------------------------


def detect(tree: YMap) -> Evidence | None:
    """The first upstream-only construct of the document, or None (a native playbook).

    Only constructs this engine's own language rejects count, so a native playbook is
    never read as upstream's: `input`/`auth`/`command`/`libs` under a tool, a list under
    `tool`, python code with no `main` to call, step `set`/`output`/`input`, arc `set`,
    `spec.policy` of a tool or loop, upstream's root keys and retry keys, and the tool
    kinds only upstream has."""
    for key in IGNORED_ROOT_KEYS:
        if key in tree:
            return Evidence(f"root key '{key}'", (key,))
    metadata = tree.get("metadata")
    if isinstance(metadata, dict):
        for key in IGNORED_METADATA_KEYS:
            if key in metadata:
                return Evidence(f"metadata key '{key}'", ("metadata", key))
    for path, item in _items(tree):
        found = _item_sign(item, path)
        if found is not None:
            return found
    return None


def _items(tree: YMap) -> Iterator[tuple[Path, dict[str, Any]]]:
    for section in ("workflow", "workbook"):
        items = tree.get(section)
        if isinstance(items, list):
            for index, item in enumerate(items):
                if isinstance(item, dict):
                    yield (section, index), item


def _item_sign(item: dict[str, Any], path: Path) -> Evidence | None:
    for key in _STEP_SIGNS:
        if key in item:
            return Evidence(f"step key '{key}'", (*path, key))
    tool = item.get("tool")
    if isinstance(tool, list):
        return Evidence("a list of tasks under 'tool'", (*path, "tool"))
    if isinstance(tool, dict):
        found = _tool_sign(tool, (*path, "tool"))
        if found is not None:
            return found
    return _flow_sign(item, path, tool if isinstance(tool, dict) else {})


def _flow_sign(item: dict[str, Any], path: Path, tool: dict[str, Any]) -> Evidence | None:
    loop = item.get("loop")
    if isinstance(loop, dict):
        spec = loop.get("spec")
        if "cursor" in loop or (isinstance(spec, dict) and "policy" in spec):
            return Evidence("a loop policy or cursor", (*path, "loop"))
    nxt = item.get("next")
    arcs = nxt.get("arcs") if isinstance(nxt, dict) else None
    for index, arc in enumerate(arcs if isinstance(arcs, list) else []):
        if isinstance(arc, dict) and ("set" in arc or "cond" in arc):
            return Evidence("an arc with 'set' or 'cond'", (*path, "next", "arcs", index))
    for owner in (item, tool):
        retry = owner.get("retry")
        if isinstance(retry, dict) and any(key in retry for key in _RETRY_SIGNS):
            return Evidence("upstream retry keys", (*path, "retry"))
    return None


def _tool_sign(tool: dict[str, Any], path: Path) -> Evidence | None:
    kind = tool.get("kind")
    if unavailable(kind):
        return Evidence(f"tool kind '{kind}'", (*path, "kind"))
    for key in UPSTREAM_TOOL_KEYS:
        if key in tool:
            return Evidence(f"'{key}' under tool", (*path, key))
    spec = tool.get("spec")
    if isinstance(spec, dict):
        for key in ("policy", "input", "auth", "command"):
            if key in spec:
                return Evidence(f"'{key}' under tool.spec", (*path, "spec", key))
    code = tool.get("code", spec.get("code") if isinstance(spec, dict) else None)
    if kind == "python" and isinstance(code, str) and _toplevel_code(code, tool):
        return Evidence("python code with no main() to call", (*path, "code"))
    return None


def _toplevel_code(code: str, tool: dict[str, Any]) -> bool:
    """Python code that parses and defines no function to call: upstream's convention (in
    this engine's own, such code fails when it runs)."""
    spec = tool.get("spec")
    name = tool.get("callable") or (spec.get("callable") if isinstance(spec, dict) else None)
    if "module" in tool or (isinstance(spec, dict) and "module" in spec):
        return False
    try:
        module = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    target = name if isinstance(name, str) else "main"
    return not any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == target
        for node in module.body
    )


# --- what cannot run here ------------------------------------------------------------------


def unsupported(tree: YMap) -> list[Finding]:
    """Every construct of an upstream file this engine cannot run yet, in document order."""
    found: list[Finding] = []
    if "spec" in tree:
        found.append(Finding("a root `spec:` block (an older form; use `workload`)", ("spec",)))
    steps = tree.get("workflow")
    for path, item in _items(tree):
        found.extend(_item_findings(item, path, is_step=path[0] == "workflow"))
    if isinstance(steps, list):
        found.extend(_template_findings(tree))
    return found


def _item_findings(item: dict[str, Any], path: Path, *, is_step: bool) -> Iterator[Finding]:
    name = item.get("step")
    if is_step and isinstance(name, str) and not _NAME.match(name):
        yield Finding("step names that are not identifiers (like catalog paths)", (*path, "step"))
    spec = item.get("spec")
    if is_step and isinstance(spec, dict) and "policy" in spec:
        yield Finding("step admission rules (`spec.policy` of a step)", (*path, "spec", "policy"))
    yield from _loop_findings(item.get("loop"), (*path, "loop"))
    tool = item.get("tool")
    if isinstance(tool, list | dict):
        for where, task in pipeline_tasks(tool):
            yield from tool_findings(task, (*path, "tool", *where))


def _loop_findings(loop: Any, path: Path) -> Iterator[Finding]:
    if not isinstance(loop, dict):
        return
    spec = loop.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    if "cursor" in loop or spec.get("mode") == "cursor" or "frame" in spec:
        yield Finding("cursor loops (`loop.cursor`)", path)
    policy = spec.get("policy")
    if policy is not None and not (
        isinstance(policy, dict)
        and set(policy) <= {"exec", "results"}
        and _ordered_results(policy.get("results"))
    ):
        yield Finding(
            "loop policies other than `exec` and `results.preserve_order`",
            (*path, "spec", "policy"),
        )


def _ordered_results(results: Any) -> bool:
    """A loop's `results` policy this engine follows: `preserve_order` (its items'
    results are always in item order, whatever order they finished in)."""
    return results is None or (isinstance(results, dict) and set(results) <= {"preserve_order"})


def _template_findings(tree: YMap) -> Iterator[Finding]:
    reported: set[str] = set()
    for path, text in _strings(tree):
        if not is_template(text) or _in_pipeline(tree, path):
            continue
        for name, _ in free_names(text):
            what = _UNSUPPORTED_NAMES.get(name)
            if what is not None and what not in reported:
                reported.add(what)
                yield Finding(what, path)


def _in_pipeline(tree: YMap, path: Path) -> bool:
    """Whether `path` is inside a pipeline's tasks, whose templates have `ctx` and `iter`
    (the pipeline's worker keeps them as its tasks set them, noetl.worker.pipeline)."""
    if len(path) < 3 or path[2] != "tool" or not isinstance(path[0], str):
        return False
    items = tree.get(path[0])
    index = path[1]
    if not isinstance(items, list) or not isinstance(index, int) or index >= len(items):
        return False
    item = items[index]
    return isinstance(item, dict) and is_pipeline(item.get("tool"))


def _strings(tree: YMap) -> Iterator[tuple[Path, str]]:
    def walk(node: Any, path: Path) -> Iterator[tuple[Path, str]]:
        if isinstance(node, dict):
            for key, value in node.items():
                yield from walk(value, (*path, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                yield from walk(value, (*path, index))
        elif isinstance(node, str):
            yield path, node

    for section in ("workflow", "workbook"):
        yield from walk(tree.get(section), (section,))


def unsupported_diagnostic(findings: list[Finding], tree: YMap, file: str) -> Diagnostic:
    """ONE error for everything an upstream file needs that this engine does not have:
    E331 when it is only tool kinds, E330 otherwise. It names each construct once, with
    the line of its first use, and stands alone: the rest of such a file is not checked."""
    findings = sorted(findings, key=lambda f: line_at(tree, f.path) or 0)
    first = findings[0]
    seen: dict[str, int] = {}
    for finding in findings:
        seen.setdefault(finding.what, line_at(tree, finding.path) or 0)
    parts = [f"{what} (line {line})" if line else what for what, line in seen.items()]
    only_kinds = all(f.kind is not None for f in findings)
    if only_kinds:
        kinds = sorted({f.kind for f in findings if f.kind is not None})
        details = "; ".join(describe_kind(kind) for kind in kinds)
        message = (
            f"this upstream NoETL playbook needs tool kinds this engine does not have: "
            f"{', '.join(parts)}. {details}. A third-party tool can provide a kind (an "
            f"entry point of the `noetl.tools` group, docs/tools.md)"
        )
    else:
        message = (
            f"this upstream NoETL playbook uses what this engine does not support yet: "
            f"{'; '.join(parts)}"
        )
    return Diagnostic(
        code="E331" if only_kinds else "E330",
        message=message,
        file=file,
        line=line_at(tree, first.path),
        step=_step_name(tree, first.path),
        path=first.path,
    )


def _step_name(tree: YMap, path: Path) -> str | None:
    if len(path) >= 2 and path[0] == "workflow":
        steps = tree.get("workflow")
        if isinstance(steps, list) and isinstance(path[1], int) and path[1] < len(steps):
            item = steps[path[1]]
            name = item.get("step") if isinstance(item, dict) else None
            return name if isinstance(name, str) else None
    return None


def dialect_note(evidence: Evidence, tree: YMap, file: str) -> Diagnostic:
    """The info line `lint` shows for a file read in upstream's dialect."""
    line = line_at(tree, evidence.path)
    return Diagnostic(
        code="I001",
        message=f"read as upstream NoETL dialect (first sign: {evidence.what}): bare "
        f"workload names and step results by step name in templates, code and SQL "
        f"rendered as templates, python code run top to bottom",
        file=file,
        line=line,
        path=evidence.path,
        severity=Severity.INFO,
    )


# --- rewriting -----------------------------------------------------------------------------


def rewrite(tree: YMap, file: str) -> tuple[YMap, list[Diagnostic]]:
    """The document rewritten into the canonical tree (for `noetl.dsl.normalize`), marked
    `dialect: upstream`; a value that cannot be rewritten is reported (E200) and dropped."""
    diags: list[Diagnostic] = []
    out = new_map(tree, {k: v for k, v in tree.items() if k not in IGNORED_ROOT_KEYS})
    metadata = tree.get("metadata")
    if isinstance(metadata, dict):
        out["metadata"] = new_map(
            metadata, {k: v for k, v in metadata.items() if k not in IGNORED_METADATA_KEYS}
        )
        labels = metadata.get("labels")
        if isinstance(labels, YMap):
            out["metadata"]["labels"] = new_map(labels, {k: _label(v) for k, v in labels.items()})
    for section in ("workflow", "workbook"):
        items = tree.get(section)
        if not isinstance(items, YSeq):
            continue
        rewritten = [
            _rewrite_item(item, (section, index), file, diags) for index, item in enumerate(items)
        ]
        out[section] = new_seq(items, rewritten)
    steps = out.get("workflow")
    if isinstance(steps, YSeq):
        out["workflow"] = _implicit_end(steps)
    out["dialect"] = UPSTREAM
    return out, diags


def _label(value: Any) -> Any:
    """Upstream writes label values as any scalar (`phase: 2`); here a label is text, as
    JSON writes the scalar (`"2"`, `"true"`)."""
    if isinstance(value, bool | int | float) or value is None:
        return json.dumps(value)
    return value


def _rewrite_item(item: Any, path: Path, file: str, diags: list[Diagnostic]) -> Any:
    if not isinstance(item, YMap):
        return item
    for _ in range(len(item) + 1):
        try:
            return _rewrite_step(item)
        except ShapeError as exc:
            name = item.get("step") if path[0] == "workflow" else item.get("name")
            diags.append(
                Diagnostic(
                    code=exc.code,
                    message=exc.message,
                    file=file,
                    line=line_at(item, exc.path) or item.line,
                    step=name if isinstance(name, str) else None,
                    path=path + exc.path,
                )
            )
            if not (exc.path and exc.path[0] in item):
                return item
            item = new_map(item, {k: v for k, v in item.items() if k != exc.path[0]})
    return item


def _rewrite_step(step: YMap) -> YMap:
    out = new_map(step, {k: v for k, v in step.items() if k not in ("output", "input")})
    tool = step.get("tool")
    if is_pipeline(tool):
        if "input" in step:
            raise ShapeError(
                "step 'input' with a list of tasks: give each task its input", ("input",)
            )
        out["tool"] = within(("tool",), rewrite_pipeline, tool)
        tool = None
    elif isinstance(tool, list) and len(tool) == 1:
        tool = tool[0]  # a pipeline of one task is that task (its `name` is a label)
        set_origin(out, "tool", ("tool", 0))
    if isinstance(tool, dict):
        out["tool"] = within(("tool",), lambda t: rewrite_tool(t, step.get("input")), tool)
    elif "input" in step:
        raise ShapeError("step 'input' needs a tool to give it to", ("input",))
    loop = step.get("loop")
    if isinstance(loop, dict):
        out["loop"] = _rewrite_loop(loop)
    nxt = step.get("next")
    if isinstance(nxt, dict) and isinstance(nxt.get("arcs"), YSeq):
        out["next"] = _rewrite_arcs(nxt)
    output = step.get("output")
    if isinstance(output, dict) and output.get("output_select") is not None:
        out["result"] = _select(output, step.get("result"))
        set_origin(out, "result", ("output", "output_select"))
    return out


def _select(output: dict[str, Any], result: Any) -> Any:
    """`output: {output_select: [fields]}` is `result.select` (the other keys of
    `output`, where upstream stores results, are this engine's result store's business)."""
    select = output["output_select"]
    if not (isinstance(select, list) and all(isinstance(name, str) for name in select)):
        raise ShapeError("output_select: a list of field names", ("output", "output_select"))
    if result is not None and not isinstance(result, dict):
        return result  # reported by the step's own validation
    merged = new_map(output, dict(result or {}))
    merged["select"] = list(select)
    return merged


def _rewrite_loop(loop: dict[str, Any]) -> Any:
    """`spec.policy: {exec: ...}` is where upstream runs the items (locally or spread over
    its workers): this engine's runtime places tasks itself, so it is dropped."""
    spec = loop.get("spec")
    if not isinstance(spec, dict) or "policy" not in spec:
        return loop
    out = new_map(loop, dict(loop))
    out["spec"] = new_map(spec, {k: v for k, v in spec.items() if k != "policy"})
    if not out["spec"]:
        del out["spec"]
    return out


def _rewrite_arcs(nxt: dict[str, Any]) -> Any:
    """An arc's `cond` (an older name of `when`, a bare expression) becomes its `when`."""
    arcs = nxt["arcs"]
    if not any(isinstance(arc, dict) and "cond" in arc for arc in arcs):
        return nxt
    items = []
    for arc in arcs:
        if isinstance(arc, dict) and "cond" in arc and "when" not in arc:
            cond = arc["cond"]
            new_arc = new_map(arc, {k: v for k, v in arc.items() if k != "cond"})
            new_arc["when"] = cond if is_template(cond) else f"{{{{ {cond} }}}}"
            set_origin(new_arc, "when", ("cond",))
            items.append(new_arc)
        else:
            items.append(arc)
    out = new_map(nxt, dict(nxt))
    out["arcs"] = new_seq(arcs, items)
    return out


def _implicit_end(steps: YSeq) -> YSeq:
    """Upstream routes a step without `next` to the step named `end`, when there is one."""
    names = {s.get("step") for s in steps if isinstance(s, dict)}
    if "end" not in names:
        return steps
    items = []
    for step in steps:
        if isinstance(step, YMap) and "next" not in step and step.get("step") != "end":
            routed = new_map(step, dict(step))
            routed["next"] = "end"
            routed.key_lines["next"] = step.line
            set_origin(routed, "next", ("step",))
            items.append(routed)
        else:
            items.append(step)
    return new_seq(steps, items)
