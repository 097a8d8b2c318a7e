"""`evolve`: `dataclasses.replace` for the hot paths (a task given its workload, an append
given its queue changes), about three times faster: the fields are copied one by one, not
passed through `__init__`'s keywords. Only for dataclasses whose `__init__` does nothing
else (no `__post_init__`); any other goes through `dataclasses.replace`."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["evolve"]

T = TypeVar("T")

# The fields of each class evolved so far, in order and as a set (None: evolved by
# `dataclasses.replace`).
_FIELDS: dict[type, tuple[tuple[str, ...], frozenset[str]] | None] = {}
_set = object.__setattr__


def evolve(obj: T, **changes: Any) -> T:
    """A copy of the dataclass instance `obj` with `changes`, as `dataclasses.replace`
    makes it (TypeError for a name that is not a field)."""
    cls = type(obj)
    try:
        known = _FIELDS[cls]
    except KeyError:
        known = _FIELDS[cls] = _fields(cls)
    if known is None:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    names, name_set = known
    for name in changes:
        if name not in name_set:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
    new = object.__new__(cls)
    for name in names:
        _set(new, name, changes[name] if name in changes else getattr(obj, name))
    return new


def _fields(cls: type) -> tuple[tuple[str, ...], frozenset[str]] | None:
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__"):
        return None
    fields = dataclasses.fields(cls)
    if not all(field.init for field in fields):
        return None
    names = tuple(field.name for field in fields)
    return names, frozenset(names)
