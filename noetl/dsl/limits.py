"""Limits on data from outside: a workload, a request's strings, what a tool returns.

A playbook may nest at most `MAX_DEPTH` levels (`noetl.dsl.yaml_tree`); data that flows into
an execution is held to the same limit, since everything downstream (templates, the JSON
of events, the API's answers) walks it recursively and Python's recursion limit is near.
PostgreSQL cannot store a NUL character (U+0000) in JSON or text, so data holding one is
refused where it enters, naming where it is, rather than failing later in a commit; so is
a number JSON cannot hold (NaN, an infinity: Python's json writes them, PostgreSQL not).

The walk is iterative (it must not itself hit the recursion limit) and stops at the first
problem. Pure functions: no I/O.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from noetl.dsl.yaml_tree import MAX_DEPTH

__all__ = ["MAX_DEPTH", "DataProblem", "check_data", "json_object", "strip_nul"]

NUL = "\x00"
# A path longer than this is shown with its middle elided (a deep path has 64 parts).
_SHOWN_PATH = 80
_SCALAR_BYTES = 8  # about what a number, a boolean or null takes in JSON


@dataclass(frozen=True, slots=True)
class DataProblem:
    """What is wrong with a value, and where (`workload.users[3].name`)."""

    path: str
    message: str
    kind: str  # "depth", "nul", "number" or "size"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def check_data(
    value: Any,
    *,
    root: str = "value",
    max_depth: int = MAX_DEPTH,
    max_bytes: int | None = None,
    nul: bool = True,
) -> DataProblem | None:
    """The first problem of `value`, or None: nesting deeper than `max_depth` levels (a
    scalar is 0 levels, a map or list one more than its deepest member), a NUL character
    in a string or a key, a number JSON cannot hold (NaN, an infinity), or (with
    `max_bytes`) about that many bytes of JSON or more. `nul=False`: NUL characters are
    not a problem (where the store keeps them)."""
    if _clean(value, max_depth, max_bytes, nul):
        return None
    return _first_problem(value, root, max_depth, max_bytes, nul)


def json_object(raw: bytes, *, root: str = "body") -> dict[str, Any]:
    """The JSON object in `raw` ({} when empty), held to `check_data`'s limits; ValueError
    saying what is wrong for anything else (what a webhook or a message may start)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"the {root} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"the {root} must be a JSON object, not {type(value).__name__}")
    found = check_data(value, root=root)
    if found is not None:
        raise ValueError(str(found))  # where, and what
    return value


def _clean(value: Any, max_depth: int, max_bytes: int | None, nul: bool) -> bool:
    """True when `value` has none of the problems (the fast path, level by level, where
    most of the work is done by C code); False when it may have one."""
    size = 0
    level: list[Any] = [value]
    depth = 0
    while level:
        found = _level(level, depth < max_depth)
        if found is None:
            return False
        below, texts, size_here = found
        try:
            joined = "".join(texts)
        except TypeError:  # a key that is not a string
            return False
        if nul and NUL in joined:
            return False
        size += size_here + len(joined) + 2 * len(texts)
        if max_bytes is not None and size > max_bytes:
            return False
        level = below
        depth += 1
    return True


def _level(level: list[Any], nest: bool) -> tuple[list[Any], list[Any], int] | None:
    """The members one level below, the strings of this level (values and keys) and
    the size of the rest; None on a container where none may be (`nest` false) or a
    type the careful walk must look at."""
    below: list[Any] = []
    texts: list[Any] = []
    size = 0
    for item in level:
        kind = type(item)
        if kind is str:
            texts.append(item)
        elif kind is dict or kind is list:
            if not nest:
                return None
            if kind is dict:
                texts.extend(item)
                below.extend(item.values())
            else:
                below.extend(item)
            size += 4 * len(item) + 2
        elif isinstance(item, Mapping | list | tuple | str) or _odd_float(kind, item):
            return None  # an unusual type, NaN or an infinity: the careful walk decides
        else:
            size += _SCALAR_BYTES
    return below, texts, size


def _first_problem(
    value: Any, root: str, max_depth: int, max_bytes: int | None, nul: bool
) -> DataProblem | None:
    """The careful walk, depth first with one iterator per open container: the first
    problem and where it is."""
    size = 0
    keys: list[Any] = []  # the keys leading to the container being walked
    stack: list[Iterator[tuple[Any, Any]]] = [iter([(None, value)])]
    while stack:
        try:
            key, item = next(stack[-1])
        except StopIteration:
            stack.pop()
            if keys:
                keys.pop()
            continue
        if isinstance(key, str):
            size += len(key) + 4
            if nul and NUL in key:
                message = "a key holds a NUL character (U+0000)"
                return DataProblem(_path(root, [*keys, key]), message, "nul")
        if isinstance(item, str):
            if nul and NUL in item:
                return DataProblem(_path(root, [*keys, key]), _nul_message(item), "nul")
            size += len(item) + 2
        elif isinstance(item, Mapping | list | tuple):
            if len(stack) - 1 >= max_depth:
                message = f"nests more than {max_depth} levels deep (the limit)"
                return DataProblem(_path(root, [*keys, key]), message, "depth")
            size += 2
            members = item.items() if isinstance(item, Mapping) else enumerate(item)
            stack.append(iter(members))
            keys.append(key)
        elif isinstance(item, float) and not math.isfinite(item):
            message = f"is {item!r}, which JSON (and PostgreSQL) cannot hold"
            return DataProblem(_path(root, [*keys, key]), message, "number")
        else:
            size += _SCALAR_BYTES
        if max_bytes is not None and size > max_bytes:
            message = f"is over the limit of {max_bytes} bytes (as JSON)"
            return DataProblem(root, message, "size")
    return None


def strip_nul(text: str) -> str:
    """`text` with every NUL character replaced by U+FFFD (for messages and logs, which
    are diagnostics rather than data)."""
    return text.replace(NUL, "\ufffd") if NUL in text else text


def _odd_float(kind: type, item: Any) -> bool:
    """NaN or an infinity (the only floats whose difference with themselves is not 0)."""
    return kind is float and item - item != 0.0


def _nul_message(text: str) -> str:
    return f"holds a NUL character (U+0000) at offset {text.index(NUL)}"


def _path(root: str, keys: list[Any]) -> str:
    """`root.users[3].name` for the keys [None, "users", 3, "name"] (None: the root)."""
    parts = [root]
    for key in keys:
        if key is None:
            continue
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif isinstance(key, str) and key.isidentifier():
            parts.append(f".{key}")
        else:
            parts.append(f"[{key!r}]")
    path = "".join(parts)
    if len(path) > _SHOWN_PATH:
        half = _SHOWN_PATH // 2
        path = f"{path[:half]}…{path[-half:]}"
    return path
