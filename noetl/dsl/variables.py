"""The keys of upstream NoETL's `set:` blocks: which variable each one writes.

`ctx.NAME` writes an execution variable (`ctx`, scoped to one execution), `iter.NAME` an
iteration variable (`iter`, scoped to one loop iteration); a plain `NAME` means
`ctx.NAME`. Further dotted parts name a member (`ctx.page.size`). See
`noetl.engine.variables` for what the engine does with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SCOPES", "Target", "parse_key"]

SCOPES = ("ctx", "iter")
_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Target:
    """Where a `set` key writes: `scope` (`ctx` or `iter`), the variable, its member path."""

    scope: str
    name: str
    path: tuple[str, ...] = ()


def parse_key(key: object) -> Target:
    """`ctx.name`, `ctx.name.member`, `iter.name` or a plain `name` (meaning `ctx.name`).

    Raises ValueError naming what is wrong."""
    parts = key.split(".") if isinstance(key, str) else []
    if not parts or not all(_SEGMENT.match(part) for part in parts):
        raise ValueError(f"'{key}' is not a variable name (ctx.NAME, identifiers joined by dots)")
    if parts[0] in SCOPES:
        if len(parts) == 1:
            raise ValueError(f"'{key}' names no variable (write {parts[0]}.NAME)")
        return Target(parts[0], parts[1], tuple(parts[2:]))
    return Target("ctx", parts[0], tuple(parts[1:]))
