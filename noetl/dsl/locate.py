"""Where a diagnostic points, and how it names what it found, in the file's own terms.

* `source_path`: the key path the file has for a path of the normalized tree (normalization
  records where each value it moved or renamed came from, with `set_origin`).
* `value_line`: the file line of a line inside a string value (a template, inline code).
* `yaml_type` / `yaml_scalar`: values named as YAML names them (a map, a list, a string, a
  number, a boolean, null), never by Python's class names.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Sequence
from typing import Any, Final, Protocol

from noetl.dsl.diagnostics import Path

# In an origin path: go up one level, to the parent of the node so far.
UP: Final = "\x00up"

# A line that opens a block scalar: `key: |`, `key: >-`, or a list item `- |`.
BLOCK_SCALAR = re.compile(r"(:|^\s*-)\s*([|>])[-+0-9]*\s*(#.*)?$")


class _Positioned(Protocol):
    origins: dict[str | int, Path] | None


def set_origin(node: _Positioned, part: str | int, origin: Path) -> None:
    """Record where the value at `part` of a normalized node came from (see YMap)."""
    if node.origins is None:
        node.origins = {}
    node.origins[part] = origin


def source_path(tree: Any, path: Path) -> Path:
    """The path of the key the file has for `path`, a path in the normalized tree: `next`
    for `next.to[0].step` when the file says `next: b`, `next.arcs[0]` for `next.to[0]`
    when it used `{spec, arcs}`. Parts past what the tree holds are kept as they are."""
    node = tree
    out: list[str | int] = []
    for index, part in enumerate(path):
        origins = getattr(node, "origins", None)
        origin = origins.get(part) if origins else None
        if origin is None:
            out.append(part)
        else:
            for step in origin:
                if step == UP:
                    if out:
                        out.pop()
                else:
                    out.append(step)
        in_map = isinstance(node, dict) and isinstance(part, str) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_map or in_list):
            out.extend(path[index + 1 :])
            break
        node = node[part]
    return tuple(out)


def yaml_type(value: Any) -> str:
    """How a value of the document is named in a message, in YAML's words: `a map`,
    `a list`, `a string`, `a number`, `a boolean`, `null`."""
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list | tuple):
        return "a list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, _dt.date):
        return "a date"
    return "a value"


def yaml_scalar(value: Any) -> str:
    """A scalar written as YAML would show it: `true`, `null`, `5`, `'text'`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _dt.date):
        return value.isoformat()
    return repr(value)


def value_line(lines: Sequence[str], key_line: int, text: str, lineno: int) -> int:
    """The file line of line `lineno` (from 1) of the string `text`, the value of the key on
    `key_line`. Exact for a literal block (`|`: the text starts on the next line, a line
    per line); otherwise (a folded block, a quoted or plain scalar, where lines join or one
    physical line holds several code lines as `\\n`) the first line from the value's start
    that holds that line's text, else the value's first line."""
    header = lines[key_line - 1] if 0 < key_line <= len(lines) else ""
    block = BLOCK_SCALAR.search(header)
    start = key_line + 1 if block else key_line
    if block and block.group(2) == "|":
        return start + lineno - 1
    parts = text.splitlines()
    wanted = parts[lineno - 1].strip() if 0 < lineno <= len(parts) else ""
    if wanted:
        for number in range(max(start, 1), min(len(lines), start + len(parts) + 1) + 1):
            if wanted in lines[number - 1]:
                return number
    return start
