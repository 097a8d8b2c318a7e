"""Turn pydantic validation errors into diagnostics a person can act on."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from noetl.dsl.diagnostics import Diagnostic, Path
from noetl.dsl.kinds import TOOL_SPECS, spec_fields
from noetl.dsl.locate import source_path, yaml_scalar, yaml_type
from noetl.dsl.model import NAME_PATTERN, ON_STEP_FAIL_PATTERN, NextEdge, Playbook, Step
from noetl.dsl.yaml_tree import line_at

_CONTEXT_NAMES = {
    "tool": "tool",
    "loop": "loop",
    "result": "result",
    "collect": "collect",
    "retry": "retry",
    "policy": "policy",
    "metadata": "metadata",
    "next": "next",
    "then": "case action",
    "spec": "spec",
}


def suggest(word: str, choices: Iterable[str]) -> str:
    """`; did you mean 'x'?` when a close match exists."""
    match = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f"; did you mean '{match[0]}'?" if match else ""


def clean_path(tree: Any, loc: Sequence[str | int]) -> Path:
    """The part of a pydantic location that names real keys and indexes of the tree."""
    node = tree
    off_tree = False  # past a key the document does not have: keep names, drop tags
    out: list[str | int] = []
    for part in loc:
        in_map = isinstance(node, dict) and isinstance(part, str) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not off_tree and (in_map or in_list):
            node = node[part]
            out.append(part)
        elif (off_tree or isinstance(node, dict)) and isinstance(part, str) and not _is_tag(part):
            out.append(part)  # a missing or extra key (and what a missing key would hold)
            off_tree = True
    return tuple(out)


def _is_tag(part: str) -> bool:
    """pydantic's union / validator tags such as `str`, `list[any]`, `function-before[...]`."""
    return any(c in part for c in "[]-") or part in {"str", "int", "float", "bool", "dict"}


def describe(path: Path) -> str:
    """What kind of block a path points into: `step`, `tool`, `next edge`, ..."""
    if not path:
        return "root"
    if len(path) == 2 and path[0] == "workflow":
        return "step"
    if len(path) == 2 and path[0] == "workbook":
        return "workbook task"
    last_name = next((p for p in reversed(path) if isinstance(p, str)), "")
    if isinstance(path[-1], int):
        return {"to": "next edge", "sink": "sink", "case": "case branch"}.get(last_name, last_name)
    if last_name == "spec" and len(path) >= 2 and path[-2] == "tool":
        return "tool spec"
    if last_name == "spec" and len(path) >= 2 and isinstance(path[-2], int):
        return "sink spec" if "sink" in path else "step spec"
    return _CONTEXT_NAMES.get(last_name, last_name)


def step_name(tree: Any, path: Path) -> str | None:
    if len(path) >= 2 and path[0] in ("workflow", "workbook") and isinstance(path[1], int):
        items = tree.get(path[0]) if isinstance(tree, dict) else None
        if isinstance(items, list) and 0 <= path[1] < len(items):
            item = items[path[1]]
            if isinstance(item, dict):
                name = item.get("step") if path[0] == "workflow" else item.get("name")
                if isinstance(name, str):
                    return name if path[0] == "workflow" else f"workbook:{name}"
    return None


def allowed_keys(model: type[BaseModel], path: Path) -> set[str]:
    """The keys the model accepts at `path` (empty when unknown)."""
    current: Any = model
    for part in path:
        current = _descend(current, part)
        if current is None:
            return set()
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        keys = {f.alias or name for name, f in current.model_fields.items()}
        if current is Playbook:
            return keys - {"dialect"}  # set by the loader
        # upstream NoETL's `set` of a step or an arc: not a key of this engine's language
        return keys - {"set"} if current in (Step, NextEdge) else keys
    return set()


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(tp) if a is not type(None)]
            models = [a for a in options if _unwrap(a) is not None and _container(a)]
            tp = models[0] if models else options[0]
        else:
            return tp


def _container(tp: Any) -> bool:
    tp = _unwrap(tp)
    origin = typing.get_origin(tp)
    return origin in (list, dict) or (isinstance(tp, type) and issubclass(tp, BaseModel))


def _descend(tp: Any, part: str | int) -> Any:
    tp = _unwrap(tp)
    origin = typing.get_origin(tp)
    if isinstance(part, int):
        return typing.get_args(tp)[0] if origin is list else None
    if origin is dict:
        return typing.get_args(tp)[1]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, info in tp.model_fields.items():
            if part in (name, info.alias):
                return info.annotation
    return None


def _short(value: Any) -> str:
    text = yaml_scalar(value)
    return text if len(text) <= 60 else text[:57] + "..."


def type_name(value: Any) -> str:
    """How a value from the document is described in a message, in YAML's words: `a list`,
    `a map`, `null`, `a number 5`, `a string 'x'`, `a boolean true`."""
    kind = yaml_type(value)
    if value is None or isinstance(value, dict | list | tuple):
        return kind
    return f"{kind} {_short(value)}"


# What pydantic's type errors expect, said the way a playbook author thinks of it.
_EXPECTED = {
    "model_type": "a map",
    "model_attributes_type": "a map",
    "dict_type": "a map",
    "list_type": "a list",
    "string_type": "a string",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
}


def _expected(err: ErrorDetails) -> str:
    """`must be ...` text for a type or value error, without the subject."""
    known = _EXPECTED.get(err["type"])
    if known is not None:
        return f"must be {known}"
    ctx = err.get("ctx") or {}
    if err["type"] == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long"
    if err["type"] == "string_too_short":
        return "must not be empty"
    text = err["msg"]
    if text.startswith("Input should be "):
        return "must be " + text.removeprefix("Input should be ")
    return text[:1].lower() + text[1:]


def _extra_keys(tree: Any, path: Path) -> set[str]:
    """Keys that would also be accepted where an unknown key was found.

    Under `tool` these are the configuration keys of its kind (the shorthand form), so
    `metod` under an http tool suggests `method`.
    """
    if not path or path[-1] != "tool":
        return set()
    node = tree
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return set()
    kind = node.get("kind") if isinstance(node, dict) else None
    model = TOOL_SPECS.get(kind) if isinstance(kind, str) else None
    return spec_fields(model) if model is not None else set()


def _message(  # noqa: PLR0917 - the parts of one error, from one caller
    err: ErrorDetails,
    path: Path,
    model: type[BaseModel],
    context: str | None,
    extra_keys: set[str],
    shown_key: str | None = None,
) -> tuple[str, str]:
    """The code and message of one error at `path` (of the normalized tree); `shown_key` is
    the key the file has there, when normalization renamed it (`retry` for
    `retry.max_attempts` when the file says `retry: 0`)."""
    kind = err["type"]
    key = str(path[-1]) if path and isinstance(path[-1], str) else None
    where = describe(path[:-1]) if key else describe(path)
    if context and (len(path) <= 1):
        where = context
    subject = f"'{shown_key or key}'" if key else where
    if kind == "extra_forbidden" and key:
        hint = suggest(key, allowed_keys(model, path[:-1]) | extra_keys)
        return "E100", f"unknown {where} key '{key}'{hint}"
    if kind == "missing" and key:
        owner = "the playbook" if where == "root" else where
        return "E101", f"{owner} is missing required key '{key}'"
    if kind == "string_pattern_mismatch":
        pattern = (err.get("ctx") or {}).get("pattern")
        if pattern == ON_STEP_FAIL_PATTERN:
            return "E102", (
                f"{subject} must be 'halt', 'continue' or 'route_edge:<step>'; "
                f"got {_short(err['input'])}"
            )
        if pattern != NAME_PATTERN:  # pragma: no cover - every pattern is listed here
            return "E102", f"{subject} must match {pattern}; got {_short(err['input'])}"
        return "E103", (
            f"{subject} must be a name of letters, digits and underscores that does not "
            f"start with a digit; got {_short(err['input'])}"
        )
    if kind == "too_short":
        if key == "workflow":
            return "E102", "'workflow' must list at least one step"
        return "E102", f"{subject} must not be empty"
    if kind.startswith("value_error") or kind == "assertion_error":
        text = err["msg"].removeprefix("Value error, ")
        # Model validators name their subject themselves ("collect with mode: map ...").
        first = text.split(" ", 1)[0]
        if first in (key, where.split(" ", 1)[0]):
            return "E102", text
        return "E102", f"{subject}: {text}"
    return "E102", f"{subject} {_expected(err)}; got {type_name(err.get('input'))}"


def translate_errors(
    errors: Iterable[ErrorDetails],
    tree: Any,
    file: str,
    *,
    base: Path = (),
    model: type[BaseModel] | None = None,
    context: str | None = None,
) -> list[Diagnostic]:
    """Diagnostics for pydantic errors; `base` prefixes locations of a nested model."""
    root_model: type[BaseModel] = model or Playbook
    grouped: dict[Path, list[ErrorDetails]] = {}
    for err in errors:
        path = clean_path(tree, (*base, *err["loc"]))
        grouped.setdefault(path, []).append(err)
    out = []
    for path, errs in grouped.items():
        rel = path[len(base) :]
        shown = source_path(tree, path)
        shown_key = shown[-1] if shown and isinstance(shown[-1], str) else None
        if len(errs) > 1 and all(e["type"] not in ("extra_forbidden", "missing") for e in errs):
            code, message = _union_message(errs, path, shown_key)
        else:
            extra = _extra_keys(tree, path[:-1]) if errs[0]["type"] == "extra_forbidden" else set()
            code, message = _message(errs[0], rel, root_model, context, extra, shown_key)
            hint = _indent_hint(tree, rel, root_model, base) if code == "E100" else ""
            if hint:
                message = message.split("; did you mean ")[0] + hint
        out.append(
            Diagnostic(
                code=code,
                message=message,
                file=file,
                line=line_at(tree, path),
                step=step_name(tree, path),
                path=shown,
            )
        )
    return out


def _union_message(errs: list[ErrorDetails], path: Path, shown_key: str | None) -> tuple[str, str]:
    named = (shown_key or path[-1]) if path and isinstance(path[-1], str) else None
    key = f"'{named}'" if named else describe(path)
    expected: list[str] = []
    for err in errs:
        text = _expected(err).removeprefix("must be ")
        if text not in expected:
            expected.append(text)
    return "E102", f"{key} must be {' or '.join(expected)}; got {type_name(errs[0]['input'])}"


def _node(tree: Any, path: Path) -> Any:
    node = tree
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _indent_hint(tree: Any, rel: Path, model: type[BaseModel], base: Path) -> str:
    """For an unknown key that belongs one block up or one block down: the indentation
    is the mistake, not the name. `rel` is the key's path below `base` (for `model`)."""
    if len(rel) < 2 or not isinstance(rel[-1], str):
        return ""
    key, block = rel[-1], rel[:-1]
    siblings = _node(tree, (*base, *block))
    if not isinstance(siblings, dict):
        return ""
    keys = list(siblings)
    before = keys[keys.index(key) - 1] if key in keys and keys.index(key) > 0 else None
    if before is not None and siblings[before] is None:
        inner = (*block, before)
        if key in allowed_keys(model, inner) | _extra_keys(tree, (*base, *inner)):
            return (
                f"; '{key}' is a {describe(inner)} key and '{before}' above it is empty: "
                f"is '{key}' indented too little?"
            )
    outer = block[:-1]
    if outer and isinstance(block[-1], str) and key in allowed_keys(model, outer):
        parent = _node(tree, (*base, *outer))
        if isinstance(parent, dict) and key not in parent:
            return (
                f"; '{key}' is a {describe(outer)} key: is it indented too far, "
                f"under '{block[-1]}'?"
            )
    return ""
