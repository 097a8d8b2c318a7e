"""A spilled result as templates read it: its fields load from the result store.

A result too large for the event log is kept whole in the result store, and the log, the
state and every event carry its envelope: its small top-level fields, `_ref`, `_store`,
`_bytes`, `_spilled: true` (noetl.worker.selection). `lazy` gives templates a
`SpilledResult` in its place: the envelope's own keys answer as they are, and any other
field or element (`{{ start.rows }}`, `{{ start.rows[1100] }}`, `{{ page['items'] }}`)
is read from the whole result, loaded once through `resolve` (the result store's read,
given by the runtime: results are written once and never change, so a replay reads the
same). The value as a whole (`{{ start }}`, `| length`, `| tojson`, iteration) is the
envelope: what is copied into a task or an event stays small.

Without `resolve`, or when the result cannot be read, a field the envelope lacks is
undefined, as a field any map lacks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from noetl.dsl.envelope import StepResult

__all__ = ["Resolve", "SpilledResult", "is_spilled", "lazy"]

Resolve = Callable[[str], Any]  # a reference -> the whole result (raises when it cannot)

_MISSING = object()


def is_spilled(value: Any) -> bool:
    """Whether `value` is the envelope of a spilled result."""
    return (
        type(value) is dict and value.get("_spilled") is True and isinstance(value.get("_ref"), str)
    )


def lazy(value: Any, resolve: Resolve | None) -> Any:
    """`value` as templates read it: a `SpilledResult` for a spilled result's envelope
    (when there is a way to read it back), else `value` itself."""
    if resolve is None or not is_spilled(value):
        return value
    return SpilledResult(value, resolve)


class SpilledResult(StepResult):
    """A spilled result's envelope whose other fields load on first use (see the module)."""

    __slots__ = ("_resolve", "_whole")

    def __init__(self, envelope: dict[str, Any], resolve: Resolve) -> None:
        super().__init__(envelope)
        self._resolve = resolve
        self._whole: Any = _MISSING

    def whole(self) -> Any:
        """The whole result (None when it cannot be read)."""
        if self._whole is _MISSING:
            try:
                self._whole = self._resolve(str(dict.__getitem__(self, "_ref")))
            except Exception:  # gone, or the store is down: the envelope is what there is
                self._whole = None
        return self._whole

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str) and dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        whole = self.whole()
        if whole is None:
            raise KeyError(key)
        return whole[key]

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self[key]
        except (KeyError, IndexError, TypeError):
            return default

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        whole = self.whole()
        try:
            return whole is not None and key in whole
        except TypeError:
            return False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except (KeyError, IndexError, TypeError):
            pass
        return super().__getattr__(name)  # upstream's envelope forms (`.data` ...)
