"""A result as upstream NoETL's templates address it.

Upstream wrapped every result in an envelope `{status, data}` and let templates reach
the payload through it: `{{ step.data }}`, `{{ step.result }}`, and a field of the payload
straight from the envelope (`{{ output.data.meta.page }}` on an http result whose body
holds `meta`). This engine keeps a result as its tool gave it (an http result is
`{status_code, headers, data: <body>}`), so `StepResult` answers those forms:

* `.data` and `.result`, on a result with no key of that name, are the result itself;
* a name that is neither a key nor one of those is looked up in the result's `data` map
  (the http body), when it has one.

A loop step's result (the list of its items' outputs) is a `LoopResult`: a list that also
answers `.results` (itself), `.data` (itself) and `.stats` (`total`, `completed`,
`succeeded`, `failed`: the loop's counters).

A key of the result always wins: data is read before attributes. It is a shallow copy,
and a template that returns it gets a plain map (values are copied as data).

It is part of what templates see, in the engine's render context and in the worker's
policy rules alike, so it lives with the renderer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["LoopResult", "StepResult"]


class StepResult(dict[str, Any]):
    """A result map that answers upstream's envelope forms (see the module)."""

    __slots__ = ()

    @classmethod
    def of(cls, value: Any) -> Any:
        """`value` as a StepResult when it is a plain map, else `value` itself."""
        return cls(value) if type(value) is dict else value

    @property
    def data(self) -> dict[str, Any]:
        return self

    @property
    def result(self) -> dict[str, Any]:
        return self

    def __getattr__(self, name: str) -> Any:
        inner = dict.get(self, "data")
        if not name.startswith("_") and isinstance(inner, Mapping) and name in inner:
            return inner[name]
        raise AttributeError(name)


class LoopResult(list[Any]):
    """A loop step's result as upstream's templates address it (see the module)."""

    __slots__ = ("stats",)

    def __init__(self, items: Any, stats: Mapping[str, Any]) -> None:
        super().__init__(items)
        self.stats = dict(stats)

    @classmethod
    def of(cls, value: Any, stats: Mapping[str, Any]) -> Any:
        """`value` as a LoopResult when it is a plain list, else `value` itself."""
        return cls(value, stats) if type(value) is list else value

    @property
    def results(self) -> list[Any]:
        return self

    @property
    def data(self) -> list[Any]:
        return self
