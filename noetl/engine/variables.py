"""Execution variables (`ctx`) of upstream NoETL playbooks: the keys `set:` writes, the
patches they make, and the bounds every value is held to.

`ctx` is a mutable mapping scoped to one execution, and event-sourced: a change is never
made in place, it travels as a patch (`{name: new value}`, top-level names only) inside
the event that makes it (`step.finished` for a step's `set`, `next.evaluated` for its
arcs' `set`, `tool.processed` for a task's `Outcome.ctx`), and the state's fold applies
it (`noetl.engine.state`), so replaying the log gives the same values. A key may name a
member of a variable (`ctx.page.size`): the patch then carries the whole new value of
`page`, computed here, so the fold only ever assigns.

`iter.*` variables belong to one loop iteration (upstream's tasks set them in a
pipeline); a step's or an arc's `set` runs outside any iteration, so it may write only
`ctx.*` (a plain key means `ctx.<key>`).

Pure functions, no I/O (the two that render, `patch_of` and `render_set`, take the
decision's `Turn`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from noetl.dsl.limits import check_data
from noetl.dsl.variables import Target, parse_key
from noetl.errors import TemplateError

if TYPE_CHECKING:
    from noetl.dsl.model import Step
    from noetl.engine.turn import Turn

__all__ = [
    "MAX_CTX_BYTES",
    "Target",
    "apply_assignments",
    "check_ctx",
    "normalize_patch",
    "parse_key",
    "patch_of",
    "render_set",
]

# The JSON size `ctx` may reach as a whole: every task of an upstream playbook carries it
# (its python code and SQL read it), so it is held well below a task's result limit.
MAX_CTX_BYTES = 4 * 1024 * 1024


def _assign(current: Any, path: tuple[str, ...], value: Any) -> Any:
    """`current` with the member at `path` set to `value` (copies, never mutates)."""
    if not path:
        return value
    base = dict(current) if isinstance(current, Mapping) else {}
    base[path[0]] = _assign(base.get(path[0]), path[1:], value)
    return base


def apply_assignments(
    ctx: Mapping[str, Any], assignments: list[tuple[Target, Any]]
) -> dict[str, Any]:
    """The patch (`{name: new value}`) that the assignments, in order, make to `ctx`."""
    patch: dict[str, Any] = {}
    for target, value in assignments:
        current = patch[target.name] if target.name in patch else ctx.get(target.name)
        patch[target.name] = _assign(current, target.path, value)
    return patch


def check_ctx(ctx: Mapping[str, Any], patch: Mapping[str, Any]) -> str | None:
    """Why `ctx` with `patch` applied would be refused, or None: too deep, a NUL
    character, a number JSON cannot hold, or more than `MAX_CTX_BYTES` of JSON."""
    for name, value in patch.items():
        problem = check_data(value, root=f"ctx.{name}", max_bytes=MAX_CTX_BYTES)
        if problem is not None:
            return str(problem)
    merged = {**ctx, **patch}
    size = len(json.dumps(merged, default=str, ensure_ascii=False).encode())
    if size > MAX_CTX_BYTES:
        return (
            f"ctx would hold about {size} bytes of JSON, over the limit of {MAX_CTX_BYTES}: "
            f"keep large data in a table or a file and put a reference in ctx"
        )
    return None


def normalize_patch(ctx: Mapping[str, Any], patch: Any) -> dict[str, Any]:
    """A task's `ctx` patch (`Outcome.ctx`: `{name: value}`; `ctx.name` and member paths
    are read as keys of `set` are) as top-level names, checked. Raises TemplateError."""
    if not isinstance(patch, Mapping):
        raise TemplateError(f"a task's ctx patch must be a map, got {type(patch).__name__}")
    assignments: list[tuple[Target, Any]] = []
    for key, value in patch.items():
        try:
            target = parse_key(key)
        except ValueError as exc:
            raise TemplateError(str(exc)) from None
        if target.scope != "ctx":
            raise TemplateError(f"'{key}': a task's ctx patch sets only ctx variables")
        assignments.append((target, value))
    out = apply_assignments(ctx, assignments)
    problem = check_ctx(ctx, out)
    if problem is not None:
        raise TemplateError(problem)
    return out


def patch_of(
    turn: Turn,
    block: Mapping[str, Any],
    values: Mapping[str, Any],
    pending: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The patch a `set:` block makes, its values rendered against `values` (each key
    sees the same names: the values as they were before the block), on top of `ctx` and
    the `pending` patch of the same event. Raises TemplateError naming the key."""
    base = {**turn.state.ctx, **(pending or {})}
    assignments: list[tuple[Target, Any]] = []
    for key, template in block.items():
        value = turn.engine.renderer.render(template, values, field=key)
        assignments.append((parse_key(key), value))
    patch = apply_assignments(base, assignments)
    problem = check_ctx(base, patch)
    if problem is not None:
        raise TemplateError(problem)
    return patch


def render_set(
    turn: Turn,
    step: Step,
    block: Mapping[str, Any],
    names: Mapping[str, Any],
) -> dict[str, Any]:
    """The patch of a step's own `set:`, rendered with the step's names and `names` (its
    result, as `result`, `this` and its name)."""
    values = turn.ctx(step, turn.state.steps[step.step].bind).build(**names)
    return patch_of(turn, block, values)
