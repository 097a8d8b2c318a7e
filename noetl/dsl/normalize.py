"""Normalization: shorthand and legacy forms rewritten into canonical DSL v2.

Two kinds of rewriting happen over each step and workbook task of a document:

* shorthand, always on and silent (`noetl.dsl.desugar`): `next: b`, `retry: 3`,
  `tool: noop`, tool configuration written directly under `tool`, a sink as a one-key map,
  the loop aliases.
* legacy (seed section 7.10, here), behind a flag that defaults on, each with a
  deprecation warning: `iter`/`iterator`/`over`/`coll` -> `loop`, `save` -> `result.sink`.

A key that cannot be normalized is reported at the line it came from and dropped, so the
model still checks the rest of the step.
"""

from __future__ import annotations

from typing import Any

from noetl.dsl.desugar import desugar_sinks, desugar_step
from noetl.dsl.diagnostics import Diagnostic, Path, Severity
from noetl.dsl.locate import UP, set_origin
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
from noetl.dsl.yaml_tree import YMap, YSeq, line_at

LEGACY_LOOP_KEYS = ("iter", "iterator", "over", "coll")


# --- legacy forms ------------------------------------------------------------------------


def _legacy_warning(
    file: str, step: YMap, key: str, *, target: str, path: Path, name: str | None
) -> Diagnostic:
    return Diagnostic(
        code="W201",
        message=f"'{key}' is a legacy form, normalized to '{target}'; "
        f"run `noetl codemod` to rewrite it",
        file=file,
        line=step.key_line(key),
        step=name,
        path=path,
        severity=Severity.WARNING,
    )


def _legacy(step: YMap, file: str, path: Path, allow: bool, diags: list[Diagnostic]) -> YMap:
    name = step.get("step") if isinstance(step.get("step"), str) else None
    for key in (*LEGACY_LOOP_KEYS, "save"):
        if key not in step:
            continue
        target = "result.sink" if key == "save" else "loop"
        if not allow:
            diags.append(
                Diagnostic(
                    code="E202",
                    message=f"'{key}' is a legacy form and legacy forms are off; "
                    f"use '{target}' (or run `noetl codemod`)",
                    file=file,
                    line=step.key_line(key),
                    step=name,
                    path=(*path, key),
                )
            )
            step = new_map(step, {k: v for k, v in step.items() if k != key})
            continue
        diags.append(_legacy_warning(file, step, key, target=target, path=(*path, key), name=name))
        if key == "save":
            step = _legacy_save(step)
        elif "loop" in step:
            raise ShapeError(f"both 'loop' and legacy '{key}' are given; keep 'loop'", (key,))
        else:
            value = step[key]
            if isinstance(value, str | list):
                value = itself(new_map(step, {"collection": value}), "collection")
            step = rename(step, key, "loop")
            step["loop"] = value
    return step


def _legacy_save(step: YMap) -> YMap:
    saved = step["save"]
    result = step.get("result")
    made = result is None
    if result is None:
        result = YMap(line=step.key_line("save"))
    if not isinstance(result, dict):
        return step
    result = new_map(result, dict(result))
    existing = result.get("sink")
    sinks = (
        within(("result", "sink"), desugar_sinks, existing)
        if existing is not None
        else YSeq(line=line_of(saved))
    )
    added = within(("save",), desugar_sinks, saved) if saved is not None else YSeq()
    merged = new_seq(sinks, [*sinks, *added], [*sinks.item_lines, *added.item_lines])
    # Where each sink came from: the result's own `sink` list, or the step's `save`.
    for index in range(len(sinks)):
        set_origin(merged, index, origin_of(sinks, index))
    for index in range(len(added)):
        up = () if existing is None else (UP, UP, "save")
        set_origin(merged, len(sinks) + index, (*up, *origin_of(added, index)))
    result["sink"] = merged
    if existing is None:
        set_origin(result, "sink", ("save",) if made else (UP, "save"))
    out = new_map(step, {k: v for k, v in step.items() if k != "save"})
    out["result"] = result
    if made:
        set_origin(out, "result", ())
    out.key_lines.setdefault("result", step.key_line("save"))
    return out


# --- the document pass -------------------------------------------------------------------


def normalize_document(
    tree: Any, file: str, *, allow_legacy: bool = True
) -> tuple[Any, list[Diagnostic]]:
    """Normalize every step and workbook task; return the new tree and diagnostics."""
    diags: list[Diagnostic] = []
    if not isinstance(tree, YMap):
        return tree, diags
    out = new_map(tree, dict(tree))
    for section, with_legacy in (("workflow", True), ("workbook", False)):
        items = tree.get(section)
        if not isinstance(items, YSeq):
            continue
        new_items = [
            _normalize_item(
                item,
                file=file,
                path=(section, index),
                line=items.item_line(index),
                allow_legacy=allow_legacy,
                with_legacy=with_legacy,
                diags=diags,
            )
            for index, item in enumerate(items)
        ]
        out[section] = new_seq(items, new_items)
    return out, diags


def _normalize_item(
    item: Any,
    *,
    file: str,
    path: Path,
    line: int,
    allow_legacy: bool,
    with_legacy: bool,
    diags: list[Diagnostic],
) -> Any:
    """Normalize one step; a key that cannot be normalized is reported and dropped, so the
    model still checks the rest of the step without repeating the same complaint."""
    name = item.get("step") if isinstance(item, dict) else None
    for _ in range(len(item) + 1 if isinstance(item, dict) else 1):
        try:
            if with_legacy and isinstance(item, YMap):
                item = _legacy(item, file, path, allow_legacy, diags)
            return desugar_step(item)
        except ShapeError as exc:
            diags.append(
                Diagnostic(
                    code=exc.code,
                    message=exc.message,
                    file=file,
                    line=_path_line(item, exc.path) or line,
                    step=name if isinstance(name, str) else None,
                    path=path + exc.path,
                )
            )
            if not (exc.path and isinstance(item, dict) and exc.path[0] in item):
                return item
            item = new_map(item, {k: v for k, v in item.items() if k != exc.path[0]})
    return item


def _path_line(node: Any, path: Path) -> int | None:
    return line_at(node, path) if path else None
