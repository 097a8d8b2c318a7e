"""Shorthand forms rewritten into canonical DSL v2, always on and silent.

`next: b`, `retry: 3`, `tool: noop`, tool configuration written directly under `tool`
(moved into `tool.spec`), `result` inside `tool`, a sink as a one-key map
`{postgres: {...}}`, the loop aliases `in`/`iterator`/`spec.mode`.

The `desugar_*` functions are also the models' before-validators (`noetl.dsl.model`), so a
playbook built from JSON (the API) accepts the same shorthand; `noetl.dsl.normalize` runs
them over a whole document. They keep line numbers: a new map made from a node carries that
node's line, so errors found later still point at the right place. And they keep origins: a
value moved or renamed records where it came from (`set_origin`), so a diagnostic names the
key the file has (`next.arcs[0]`, not `next.to[0]`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any

from noetl.dsl.diagnostics import Path
from noetl.dsl.kinds import SINK_SPECS, TOOL_SPECS, spec_fields
from noetl.dsl.locate import UP, set_origin, yaml_scalar, yaml_type
from noetl.dsl.rewrite import (
    ShapeError,
    itself,
    line_of,
    new_map,
    new_seq,
    origin_of,
    rename,
    within,
)
from noetl.dsl.yaml_tree import YMap, YSeq

TOOL_KEYS = frozenset({"kind", "spec", "args", "timeout_ms", "retry", "result"})
SINK_COMMON_KEYS = frozenset({"id", "async", "timeout_ms", "retry", "args"})
_LOOP_SPEC_KEYS = ("mode", "max_in_flight", "max_concurrency")


# --- next --------------------------------------------------------------------------------


def _edge(value: Any, index: int, line: int) -> Any:
    if isinstance(value, str):
        edge = YMap(line=line)
        edge["step"] = value
        edge.key_lines["step"] = line
        return itself(edge, "step")
    if isinstance(value, dict):
        return value
    raise ShapeError(
        f"an edge must be a step name or a {{step, when}} map, got {yaml_type(value)}",
        (index,),
    )


def _edges(value: Any, base: Path) -> YSeq:
    if isinstance(value, str | dict):
        value = itself(new_seq(value, [value], [line_of(value)]), 0)
    if not isinstance(value, list):
        raise ShapeError(
            f"next edges must be a list of steps or {{step, when}} maps, got {yaml_type(value)}",
            base,
        )
    seq = value if isinstance(value, YSeq) else YSeq(value)
    items = []
    for index, item in enumerate(seq):
        try:
            items.append(_edge(item, index, seq.item_line(index)))
        except ShapeError as exc:
            raise ShapeError(exc.message, base + exc.path) from None
    return new_seq(seq, items)


def desugar_next(value: Any) -> Any:
    """`next` in any form -> `{mode, to: [{step, when}, ...]}`."""
    if value is None or (isinstance(value, dict) and "to" in value and "arcs" not in value):
        if value is not None:
            out = new_map(value, dict(value))
            out["to"] = _edges(value["to"], ("to",))
            out.setdefault("mode", "inclusive")
            return out
        return None
    if isinstance(value, str | list):
        out = new_map(value)
        out["mode"] = "inclusive"
        out["to"] = _edges(value, ())
        return itself(out, "to")
    if isinstance(value, dict):
        if "arcs" in value:
            if "to" in value:
                raise ShapeError("next has both 'to' and 'arcs'; keep one", ("arcs",))
            spec = value.get("spec") or {}
            if not isinstance(spec, dict):
                raise ShapeError("next.spec must be a map like {mode: exclusive}", ("spec",))
            for key in spec:
                if key != "mode":
                    raise ShapeError(
                        f"unknown next.spec key '{key}' (next.spec takes only 'mode')",
                        ("spec", key),
                    )
            rest = {k: v for k, v in value.items() if k not in ("spec", "arcs")}
            out = new_map(value, rest)
            out["mode"] = spec.get("mode", "inclusive")
            out["to"] = _edges(value["arcs"], ("arcs",))
            set_origin(out, "mode", ("spec", "mode"))
            set_origin(out, "to", ("arcs",))
            return out
        if "step" in value:
            out = new_map(value)
            out["mode"] = "inclusive"
            out["to"] = _edges(value, ())
            return itself(out, "to")
        raise ShapeError("a next block needs 'to' (a list of edges) or 'arcs'")
    raise ShapeError(
        f"next must be a step name, a list of edges or a {{mode, to}} block, got {yaml_type(value)}"
    )


# --- retry -------------------------------------------------------------------------------


def desugar_retry(value: Any) -> Any:
    """`retry: true | false | N | {...}` -> a retry block."""
    if value is None or isinstance(value, dict):
        return value
    if value is True:
        return YMap()
    if isinstance(value, int):  # False included: one attempt
        return itself(YMap({"max_attempts": 1 if value is False else value}), "max_attempts")
    raise ShapeError(
        f"retry must be true, false, a number of attempts or a block, "
        f"got {yaml_type(value)} {yaml_scalar(value)}"
    )


# --- loop --------------------------------------------------------------------------------


def desugar_loop(value: Any) -> Any:
    """Accept the upstream loop aliases `in`, `iterator` and `spec: {mode, max_in_flight}`."""
    if not isinstance(value, dict):
        if value is None:
            return None
        raise ShapeError(
            f"loop must be a block like {{collection, element}}, got {yaml_type(value)}"
        )
    out: dict[str, Any] = value
    for alias, canonical in (("in", "collection"), ("iterator", "element")):
        if alias in out:
            if canonical in out:
                raise ShapeError(f"loop has both '{alias}' and '{canonical}'", (alias,))
            out = rename(out, alias, canonical)
    if "spec" not in out:
        return out
    spec = out["spec"]
    if not isinstance(spec, dict):
        raise ShapeError(
            "loop.spec must be a map like {mode: parallel, max_in_flight: 4}", ("spec",)
        )
    return _merge_loop_spec(out, spec)


def _merge_loop_spec(loop: dict[str, Any], spec: dict[str, Any]) -> YMap:
    for key in spec:
        if key not in _LOOP_SPEC_KEYS:
            hint = _did_you_mean(key, _LOOP_SPEC_KEYS)
            raise ShapeError(f"unknown loop.spec key '{key}'{hint}", ("spec", key))
    merged = new_map(loop, {k: v for k, v in loop.items() if k != "spec"})
    for key, target in (
        ("mode", "mode"),
        ("max_in_flight", "max_concurrency"),
        ("max_concurrency", "max_concurrency"),
    ):
        if key in spec:
            if target in merged:
                raise ShapeError(f"loop has both '{target}' and 'spec.{key}'", ("spec", key))
            merged[target] = spec[key]
            set_origin(merged, target, ("spec", key))
            if isinstance(spec, YMap):
                merged.key_lines[target] = spec.key_line(key)
    return merged


# --- tools and sinks ---------------------------------------------------------------------


def desugar_tool(value: Any) -> Any:
    """`tool: kind` or configuration written under `tool` -> `{kind, spec, args, ...}`."""
    if value is None:
        return None
    if isinstance(value, str):
        value = itself(YMap({"kind": value}), "kind")
    if not isinstance(value, dict):
        raise ShapeError(f"tool must be a block with a 'kind', got {yaml_type(value)}")
    kind = value.get("kind")
    if not isinstance(kind, str):
        return value  # the model reports the missing or mistyped kind
    model = TOOL_SPECS.get(kind)
    if model is None:
        raise ShapeError(_unknown("tool", kind, TOOL_SPECS), ("kind",), "E304")
    movable = spec_fields(model)
    shorthand = [k for k in value if k not in TOOL_KEYS and k in movable]
    return _move_into_spec(value, shorthand) if shorthand else value


def _move_into_spec(value: dict[str, Any], shorthand: list[str]) -> Any:
    spec = value.get("spec")
    made = spec is None
    if spec is None:
        spec = YMap(line=line_of(value))
    if not isinstance(spec, dict):
        return value  # the model reports the wrong type of spec
    new_spec = new_map(spec, dict(spec))
    out = new_map(value, {k: v for k, v in value.items() if k not in shorthand})
    for key in shorthand:
        if key in new_spec:
            raise ShapeError(f"'{key}' is given both under tool and under tool.spec", (key,))
        new_spec[key] = value[key]
        if not made:  # a key moved from the tool into the spec the file has
            set_origin(new_spec, key, (UP, *origin_of(value, key)))
        elif origin_of(value, key) != (key,):
            set_origin(new_spec, key, origin_of(value, key))
        if isinstance(value, YMap):
            new_spec.key_lines[key] = value.key_line(key)
    out["spec"] = new_spec  # a spec made here has no line: errors about it point at the tool
    if made:  # the configuration written under the tool: the spec is the tool's own map
        itself(out, "spec")
    return out


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    match = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f"; did you mean '{match[0]}'?" if match else ""


def _unknown(what: str, kind: str, known: dict[str, Any]) -> str:
    hint = _did_you_mean(kind, known)
    return f"unknown {what} kind '{kind}'{hint} (known: {', '.join(sorted(known))})"


def _sink(value: Any, index: int) -> Any:
    if not isinstance(value, dict):
        raise ShapeError(
            f"sink[{index}] must be a one-key map like {{postgres: {{table: t}}}}", (index,)
        )
    if "kind" in value:
        kind = value["kind"]
        if isinstance(kind, str) and kind not in SINK_SPECS:
            raise ShapeError(_unknown("sink", kind, SINK_SPECS), (index, "kind"), "E305")
        return value
    if len(value) != 1:
        raise ShapeError(
            f"sink[{index}] must name exactly one sink kind, like {{file: {{path: out.json}}}}; "
            f"got keys {', '.join(map(repr, value))}",
            (index,),
        )
    ((kind, config),) = value.items()
    if kind not in SINK_SPECS:
        raise ShapeError(_unknown("sink", kind, SINK_SPECS), (index, kind), "E305")
    if config is None:
        config = YMap(line=line_of(value))
    if not isinstance(config, dict):
        raise ShapeError(f"sink '{kind}' configuration must be a map", (index, kind))
    out = new_map(config)
    out["kind"] = kind
    out.key_lines["kind"] = value.key_line(kind) if isinstance(value, YMap) else line_of(value)
    out.key_lines["spec"] = out.key_lines["kind"]  # errors about the whole spec: `- postgres:`
    set_origin(out, "kind", (kind,))  # the file's `- postgres: {...}`
    set_origin(out, "spec", (kind,))
    spec = new_map(config)
    for key, item in config.items():
        target = out if key in SINK_COMMON_KEYS else spec
        target[key] = item
        if isinstance(config, YMap):
            target.key_lines[key] = config.key_line(key)
        if target is out:
            set_origin(out, key, (kind, key))
    out["spec"] = spec
    return out


def desugar_sinks(value: Any) -> Any:
    """`sink: {...}` or `sink: [{postgres: {...}}, ...]` -> a list of `{kind, spec, ...}`."""
    if value is None:
        return None
    if isinstance(value, dict):
        try:
            sink = _sink(value, 0)
        except ShapeError as exc:  # about the one sink itself, not an item of a list
            raise ShapeError(
                exc.message.replace("sink[0]", "sink"), exc.path[1:], exc.code
            ) from None
        return itself(new_seq(value, [sink], [line_of(value)]), 0)
    if not isinstance(value, list):
        raise ShapeError(f"sink must be a list of sinks, got {yaml_type(value)}")
    return new_seq(value, [_sink(item, i) for i, item in enumerate(value)])


def lift_tool_result(step: Any) -> Any:
    """Move `tool.result` up to the step (seed 003 shows both places)."""
    if not isinstance(step, dict):
        return step
    tool = step.get("tool")
    if not isinstance(tool, dict) or "result" not in tool:
        return step
    if "result" in step:
        raise ShapeError("result is given both on the step and inside tool; keep one", ("result",))
    new_tool = new_map(tool, {k: v for k, v in tool.items() if k != "result"})
    out = new_map(step, dict(step))
    out["tool"] = new_tool
    out["result"] = tool["result"]
    set_origin(out, "result", (*origin_of(step, "tool"), *origin_of(tool, "result")))
    if isinstance(tool, YMap):
        out.key_lines["result"] = tool.key_line("result")
    return out


# --- a step ------------------------------------------------------------------------------


StepFn = Callable[[Any], Any]
_FIELD_DESUGAR: tuple[tuple[str, StepFn], ...] = (
    ("tool", desugar_tool),
    ("next", desugar_next),
    ("retry", desugar_retry),
    ("loop", desugar_loop),
)
# The actions of a `case` branch (`then`) take the same shorthand, and a `sink` of their own.
_THEN_DESUGAR: tuple[tuple[str, StepFn], ...] = (
    ("tool", desugar_tool),
    ("next", desugar_next),
    ("retry", desugar_retry),
    ("sink", desugar_sinks),
)


def desugar_step(step: Any) -> Any:
    """All shorthand of one step (or workbook task) rewritten; legacy forms untouched."""
    if not isinstance(step, dict):
        return step
    tool = step.get("tool")
    if tool == "iterator" or (isinstance(tool, dict) and tool.get("kind") == "iterator"):
        raise ShapeError(
            "tool: iterator is not part of DSL v2; iterate with the step's 'loop:' block "
            "(loop: {collection: ..., element: ...})",
            ("tool",),
            "E203",
        )
    out = _desugar_actions(step, _FIELD_DESUGAR)
    case = out.get("case")
    if isinstance(case, list):
        branches = [within(("case", i), _desugar_branch, b) for i, b in enumerate(case)]
        out["case"] = new_seq(case, branches)
    return out


def _desugar_actions(node: dict[str, Any], fields: tuple[tuple[str, StepFn], ...]) -> YMap:
    out = new_map(node, dict(node))
    for key, fn in fields:
        if key in out:
            out[key] = within((key,), fn, out[key])
    lifted: YMap = lift_tool_result(out)  # a YMap in, a YMap out
    out = lifted
    tool = out.get("tool")
    if isinstance(tool, dict) and "retry" in tool:
        new_tool = new_map(tool, dict(tool))
        new_tool["retry"] = within(("tool", "retry"), desugar_retry, tool["retry"])
        out["tool"] = new_tool
    result = out.get("result")
    if isinstance(result, dict) and "sink" in result:
        new_result = new_map(result, dict(result))
        new_result["sink"] = within(
            (*origin_of(out, "result"), "sink"), desugar_sinks, result["sink"]
        )
        out["result"] = new_result
    return out


def _desugar_branch(branch: Any) -> Any:
    if not isinstance(branch, dict) or not isinstance(branch.get("then"), dict):
        return branch  # the model reports the wrong shape
    out = new_map(branch, dict(branch))
    out["then"] = within(("then",), lambda then: _desugar_actions(then, _THEN_DESUGAR), out["then"])
    return out
