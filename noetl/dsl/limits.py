"""Limits on data from outside: a workload, a request's strings, what a tool returns.

A playbook may nest at most `MAX_DEPTH` levels (`noetl.dsl.source`); data that flows into
an execution is held to the same limit, since everything downstream (templates, the JSON
of events, the API's answers) walks it recursively and Python's recursion limit is near.
PostgreSQL cannot store a NUL character (U+0000) in JSON or text, so data holding one is
refused where it enters, naming where it is, rather than failing later in a commit.

The walk is iterative (it must not itself hit the recursion limit) and stops at the first
problem. Pure functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl.dsl.source import MAX_DEPTH

__all__ = ["MAX_DEPTH", "DataProblem", "check_data", "clip_depth", "strip_nul"]

NUL = "\x00"
# A path longer than this is shown with its middle elided (a deep path has 64 parts).
_SHOWN_PATH = 80
_SCALAR_BYTES = 8  # about what a number, a boolean or null takes in JSON


@dataclass(frozen=True, slots=True)
class DataProblem:
    """What is wrong with a value, and where (`workload.users[3].name`)."""

    path: str
    message: str
    kind: str  # "depth", "nul" or "size"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def check_data(
    value: Any,
    *,
    root: str = "value",
    max_depth: int = MAX_DEPTH,
    max_bytes: int | None = None,
) -> DataProblem | None:
    """The first problem of `value`, or None: nesting deeper than `max_depth` levels (a
    scalar is 0 levels, a map or list one more than its deepest member), a NUL character
    in a string or a key, or (with `max_bytes`) about that many bytes of JSON or more."""
    size = 0
    # (value, depth of its container, parent entry, key): parents make the path on demand.
    stack: list[tuple[Any, int, Any, Any]] = [(value, 0, None, None)]
    while stack:
        entry = stack.pop()
        item, depth = entry[0], entry[1]
        if isinstance(item, str):
            if NUL in item:
                return DataProblem(_path(root, entry), _nul_message(item), "nul")
            size += len(item) + 2
        elif isinstance(item, Mapping | list | tuple):
            if depth >= max_depth:
                message = f"nests more than {max_depth} levels deep (the limit)"
                return DataProblem(_path(root, entry), message, "depth")
            size += 2
            if isinstance(item, Mapping):
                for key, member in item.items():
                    if isinstance(key, str):
                        if NUL in key:
                            where = _path(root, (None, 0, entry, key))
                            return DataProblem(where, "a key holds a NUL character (U+0000)", "nul")
                        size += len(key) + 4
                    stack.append((member, depth + 1, entry, key))
            else:
                size += len(item)
                stack.extend((member, depth + 1, entry, index) for index, member in enumerate(item))
        else:
            size += _SCALAR_BYTES
        if max_bytes is not None and size > max_bytes:
            message = f"is over the limit of {max_bytes} bytes (as JSON)"
            return DataProblem(root, message, "size")
    return None


def clip_depth(value: Any, max_depth: int = MAX_DEPTH) -> Any:
    """A copy of `value` with every map or list deeper than `max_depth` levels replaced by
    a short text saying so (iterative), so it can be shown and serialized safely; `value`
    itself when nothing is that deep."""
    if check_data(value, max_depth=max_depth) is None or not _container(value):
        return value
    marker = f"<nested deeper than {max_depth} levels: not shown>"
    top: Any = {} if isinstance(value, Mapping) else []
    # (source container, copy to fill, depth of the source)
    stack: list[tuple[Any, Any, int]] = [(value, top, 0)]
    while stack:
        source, copy, depth = stack.pop()
        members = source.items() if isinstance(source, Mapping) else enumerate(source)
        for key, member in members:
            if not _container(member):
                child: Any = member
            elif depth + 1 >= max_depth:
                child = marker
            else:
                child = {} if isinstance(member, Mapping) else []
                stack.append((member, child, depth + 1))
            if isinstance(copy, dict):
                copy[key] = child
            else:
                copy.append(child)
    return top


def strip_nul(text: str) -> str:
    """`text` with every NUL character replaced by U+FFFD (for messages and logs, which
    are diagnostics rather than data)."""
    return text.replace(NUL, "\ufffd") if NUL in text else text


def _container(value: Any) -> bool:
    return isinstance(value, Mapping | list | tuple)


def _nul_message(text: str) -> str:
    return f"holds a NUL character (U+0000) at offset {text.index(NUL)}"


def _path(root: str, entry: tuple[Any, int, Any, Any]) -> str:
    keys: list[Any] = []
    node: Any = entry
    while node is not None and node[2] is not None:
        keys.append(node[3])
        node = node[2]
    parts = [root]
    for key in reversed(keys):
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
