"""Upstream NoETL's tool pipelines and task policy rules, rewritten into a `pipeline` tool.

Upstream writes a list of tasks under `tool` (`- name: fetch` + `kind: http` + its
configuration; an unnamed task is `task_<position>`), each with optional policy rules
(`spec.policy.rules`: `when` + `then`, or `else: {then}`) and a `set` of names once it
ran. A single tool with policy rules or a `set` means the same for that one task, so it
becomes a pipeline of one task too (its `retry` rules re-run it in place, on the worker
that holds the task).

The canonical form, validated by `noetl.dsl.kinds.PipelineSpec` and run by
`noetl.worker.pipeline`:

    tool:
      kind: pipeline
      spec:
        tasks:
          - name: fetch
            tool: {kind: http, spec: {...}, args: {...}}   # each task rewritten as a tool
            rules: [{when: "{{ ... }}", then: {do: retry, attempts: 3, set: {...}}}]
            set: {name: "{{ output.data }}"}

`then.set_ctx: {x: v}` / `then.set_iter: {x: v}` are `then.set: {ctx.x: v}` /
`{iter.x: v}`. Positions are kept (origins), so a diagnostic about a task's configuration
points at the line the file has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from noetl.dsl.desugar import desugar_tool
from noetl.dsl.diagnostics import Path
from noetl.dsl.locate import set_origin
from noetl.dsl.rewrite import ShapeError, itself, new_map, new_seq, within
from noetl.dsl.upstream_tools import rewrite_tool
from noetl.dsl.yaml_tree import YMap, YSeq

__all__ = ["is_pipeline", "pipeline_tasks", "rewrite_pipeline"]

_POLICY_KEYS = ("rules", "exec")  # `exec` is a placement hint, ignored as for loops
_SET_SPELLINGS = (("set_ctx", "ctx."), ("set_iter", "iter."))


def is_pipeline(tool: Any) -> bool:
    """Whether a step's `tool` is a pipeline here: a list of tasks (but one task without
    policy rules or `set`, which is that task), or one tool with policy rules or `set`."""
    if isinstance(tool, list):
        return len(tool) != 1 or not isinstance(tool[0], dict) or _has_policy(tool[0])
    return isinstance(tool, dict) and _has_policy(tool)


def _has_policy(task: dict[str, Any]) -> bool:
    labeled = _labeled(task)
    body = task if labeled is None else labeled[1]
    spec = body.get("spec")
    return "set" in body or (isinstance(spec, dict) and "policy" in spec)


def _labeled(item: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """`- fetch: {kind: http, ...}`, upstream's other way to label a task."""
    if len(item) == 1 and "kind" not in item:
        [(label, body)] = item.items()
        if isinstance(label, str) and isinstance(body, dict) and "kind" in body:
            return label, body
    return None


def pipeline_tasks(tool: Any) -> list[tuple[Path, dict[str, Any]]]:
    """Each task's configuration (labels and `set` aside) with its path under `tool`."""
    items = tool if isinstance(tool, list) else [tool]
    found: list[tuple[Path, dict[str, Any]]] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        where: Path = (index,) if isinstance(tool, list) else ()
        labeled = _labeled(item)
        if labeled is not None:
            found.append(((*where, labeled[0]), labeled[1]))
        else:
            found.append((where, item))
    return found


def rewrite_pipeline(tool: Any) -> YMap:
    """The `pipeline` tool of a step's `tool` (see the module docstring), each task's
    configuration rewritten as one upstream tool (noetl.dsl.upstream_tools)."""
    single = not isinstance(tool, list)
    items = [tool] if single else list(tool)
    tasks = []
    for index, item in enumerate(items):
        where: Path = () if single else (index,)
        tasks.append(within(where, _task_at(index), item))
    seq = new_seq(tool, tasks) if isinstance(tool, YSeq) else YSeq(tasks, line=_line(tool))
    if single:
        itself(seq, 0)
    spec = itself(new_map(tool, {"tasks": seq}), "tasks")
    out = new_map(tool, {"kind": "pipeline", "spec": spec})
    return itself(out, "kind", "spec")  # type: ignore[return-value]


def _task_at(index: int) -> Callable[[Any], YMap]:
    return lambda item: _task(item, index)


def _line(node: Any) -> int:
    return int(getattr(node, "line", 0))


def _task(item: Any, index: int) -> YMap:
    if not isinstance(item, dict):
        raise ShapeError("a pipeline task must be a map with a 'kind' (and a 'name')")
    labeled = _labeled(item)
    label_path: Path = ()
    if labeled is not None:
        name: Any = labeled[0]
        label_path = (labeled[0],)
        body = labeled[1]
    else:
        name = item.get("name", f"task_{index + 1}")
        body = item
    if not isinstance(name, str):
        raise ShapeError("a pipeline task's 'name' must be a text label", ("name",))
    # `name` is the label, but in `- label: {kind: workbook, name: ...}`, the task called
    dropped = ("set",) if labeled is not None else ("name", "set")
    config = new_map(body, {k: v for k, v in body.items() if k not in dropped})
    rules = _policy_rules(body)
    spec = body.get("spec")
    if isinstance(spec, dict) and "policy" in spec:
        rest = {k: v for k, v in spec.items() if k != "policy"}
        if rest:
            config["spec"] = new_map(spec, rest)
        else:
            del config["spec"]
    rewritten = within(label_path, lambda c: desugar_tool(rewrite_tool(c)), config)
    out = new_map(item, {"name": name, "tool": rewritten})
    if labeled is not None or "name" not in item:
        itself(out, "name")
    set_origin(out, "tool", label_path)
    if rules is not None:
        out["rules"] = rules
        set_origin(out, "rules", (*label_path, "spec", "policy", "rules"))
    if "set" in body:
        out["set"] = body["set"]
        set_origin(out, "set", (*label_path, "set"))
    return out


def _policy_rules(body: dict[str, Any]) -> Any:
    spec = body.get("spec")
    policy = spec.get("policy") if isinstance(spec, dict) else None
    if policy is None:
        return None
    where: Path = ("spec", "policy")
    if not isinstance(policy, dict):
        raise ShapeError("spec.policy of a task must be a map with 'rules'", where)
    unknown = sorted(str(k) for k in policy if k not in _POLICY_KEYS)
    if unknown:
        raise ShapeError(
            f"unknown key '{unknown[0]}' in a task's spec.policy (it takes rules)",
            (*where, unknown[0]),
        )
    rules = policy.get("rules", [])
    if not isinstance(rules, list):
        raise ShapeError("spec.policy.rules must be a list of rules", (*where, "rules"))
    items = [within((*where, "rules", i), _rule, rule) for i, rule in enumerate(rules)]
    return new_seq(rules, items) if isinstance(rules, YSeq) else items


def _rule(rule: Any) -> Any:
    """`{when, then}` as it is; `{else: {then}}`, `{else: {do, ...}}` (or `else` beside
    `then`) as `{then}`; `then.set_ctx` / `set_iter` folded into `then.set`."""
    if not isinstance(rule, dict):
        raise ShapeError("a policy rule must be a map with 'when' and 'then', or 'else'")
    out = new_map(rule, {k: v for k, v in rule.items() if k != "else"})
    if "else" in rule:
        if "when" in rule:
            raise ShapeError("a policy rule has both 'when' and 'else'; keep one", ("else",))
        other = rule["else"]
        if isinstance(other, dict) and other and "then" in rule:
            raise ShapeError("a policy rule has 'then' twice (beside and in 'else')")
        if isinstance(other, dict) and "then" in other:
            out["then"] = other["then"]
            set_origin(out, "then", ("else", "then"))
        elif isinstance(other, dict) and "do" in other:  # `else: {do: ..., set: ...}`
            out["then"] = other
            set_origin(out, "then", ("else",))
    if not isinstance(out.get("then"), dict):
        raise ShapeError(
            "a policy rule needs 'then: {do: ...}'", ("then",) if "then" in out else ()
        )
    out["then"] = _then(out["then"])
    return out


def _then(then: dict[str, Any]) -> YMap:
    out = new_map(then, {k: v for k, v in then.items() if k not in ("set_ctx", "set_iter")})
    if not any(key in then for key, _ in _SET_SPELLINGS):
        return out
    merged = new_map(then.get("set"), dict(then.get("set") or {}))
    for key, prefix in _SET_SPELLINGS:
        values = then.get(key)
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ShapeError(f"{key} must be a map of names to values", ("then", key))
        for name, value in values.items():
            merged[f"{prefix}{name}"] = value
    out["set"] = merged
    return out
