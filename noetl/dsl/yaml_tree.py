"""The positioned tree every pass over a playbook works on, and the limits on its size.

`YMap` / `YSeq` are dict and list subclasses that remember the line of each node (1-based);
they hold plain scalars. Both playbook readers (`noetl.dsl.source`, `noetl.dsl.fast_reader`)
build it, so any error found later can point at the line it came from.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from typing import Any

from ruamel.yaml.scalarbool import ScalarBoolean

from noetl.dsl.diagnostics import Path

MAX_NODES = 200_000
MAX_DEPTH = 64


class YMap(dict[str, Any]):
    """A mapping from the document, with the line of the map and of each key (1-based).

    `origins` is set on maps that normalization made or rewrote: for a key whose value came
    from elsewhere in the file, the path to it from the map's own place in the file (`()`:
    the map's own node; `noetl.dsl.locate.UP` climbs to its parent). Diagnostics name the
    key the file has through it (`noetl.dsl.locate.source_path`)."""

    origins: dict[str | int, Path] | None = None

    def __init__(self, *args: Any, line: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.line = line
        self.key_lines: dict[str, int] = {}

    def key_line(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class YSeq(list[Any]):
    """A sequence from the document, with the line of the list and of each item (1-based),
    and the `origins` of items that came from elsewhere (as YMap's)."""

    origins: dict[str | int, Path] | None = None

    def __init__(self, items: Iterable[Any] = (), *, line: int = 0) -> None:
        super().__init__(items)
        self.line = line
        self.item_lines: list[int] = []

    def item_line(self, index: int) -> int:
        if 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


def line_at(tree: Any, path: Path) -> int | None:
    """The line of the deepest node on `path` that the tree knows a position for.

    Path parts that do not match the tree (pydantic union tags, for instance) are skipped.
    """
    node = tree
    line: int | None = getattr(tree, "line", None) or None
    for part in path:
        # Nodes made during normalization may not know their line (0): keep the last known.
        if isinstance(node, YMap) and isinstance(part, str) and part in node:
            line = node.key_line(part) or line
            node = node[part]
        elif isinstance(node, YSeq) and isinstance(part, int) and 0 <= part < len(node):
            line = node.item_line(part) or line
            node = node[part]
    return line


def to_plain(value: Any) -> Any:
    """Deep copy of a positioned tree into plain dicts and lists."""
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    return value


def plain_scalar(value: Any) -> Any:
    """Turn ruamel's scalar subclasses into plain Python values."""
    if value is None:
        return None
    if isinstance(value, ScalarBoolean):
        return bool(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    return value
