"""Rewriting a positioned tree: new maps and lists that keep the lines and the origins of
the nodes they are made from (see noetl.dsl.locate), and the error a rewrite raises when a
value has a shape no form of the language accepts. Used by noetl.dsl.desugar and
noetl.dsl.normalize."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from noetl.dsl.diagnostics import Path
from noetl.dsl.locate import set_origin
from noetl.dsl.yaml_tree import YMap, YSeq


class ShapeError(ValueError):
    """A value has a shape no form of the language accepts."""

    def __init__(self, message: str, path: Path = (), code: str = "E200") -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.code = code


def line_of(node: Any) -> int:
    """The line a node of the tree starts on (0 when it has none)."""
    return int(getattr(node, "line", 0))


def new_map(like: Any, items: dict[str, Any] | None = None) -> YMap:
    """A YMap positioned where `like` is; key lines and origins copied when `like` has them."""
    out = YMap(line=line_of(like))
    origins = like.origins if isinstance(like, YMap) else None
    for key, value in (items or {}).items():
        out[key] = value
        if isinstance(like, YMap) and key in like.key_lines:
            out.key_lines[key] = like.key_lines[key]
        if origins and key in origins:
            set_origin(out, key, origins[key])
    return out


def new_seq(like: Any, items: list[Any], lines: list[int] | None = None) -> YSeq:
    """A YSeq positioned where `like` is; with the item lines given, else (the same items
    in the same places) `like`'s item lines and origins."""
    out = YSeq(items, line=line_of(like))
    if lines is not None:
        out.item_lines = lines
    elif isinstance(like, YSeq):
        out.item_lines = list(like.item_lines)
        if like.origins:
            out.origins = dict(like.origins)
    return out


def origin_of(node: Any, key: str | int) -> tuple[str | int, ...]:
    """Where the value at `key` of a node came from, relative to the node's place."""
    origins = getattr(node, "origins", None)
    return origins[key] if origins and key in origins else (key,)


def itself(node: YMap | YSeq, *parts: str | int) -> YMap | YSeq:
    """Mark the values at `parts` as the node's own value re-wrapped (`next: b` is the
    edge `{step: b}` in the list `to`): a diagnostic about them names the node itself."""
    for part in parts:
        set_origin(node, part, ())
    return node


def rename(node: dict[str, Any], old: str, new: str) -> YMap:
    """Copy of a map with one key renamed, keeping order, line numbers and origins."""
    out = new_map(node)
    for key, value in node.items():
        target = new if key == old else key
        out[target] = value
        if isinstance(node, YMap):
            out.key_lines[target] = node.key_line(key)
        if origin_of(node, key) != (target,):
            set_origin(out, target, origin_of(node, key))
    return out


def within(path: Path, fn: Callable[[Any], Any], value: Any) -> Any:
    """`fn(value)`, with the path of a ShapeError made relative to the enclosing node."""
    try:
        return fn(value)
    except ShapeError as exc:
        raise ShapeError(exc.message, (*path, *exc.path), exc.code) from None
