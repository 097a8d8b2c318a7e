"""Jinja's filters and tests, wrapped so that each one takes steps and is size-checked.

Compiled templates call filters and tests directly (not through the sandbox's `call`), so
each one is replaced by a wrapper that, under the render's budget (`noetl.dsl.template_limits`):

* takes a step, plus steps for the size of what it scans (`_WEIGHT`: filters that loop in
  Python over each character or element cost more per character than the rest);
* refuses to turn into text a value over the size limit (`_TEXT`: `tojson`, `string`,
  `join`, `upper`, ...; a value repeating a reference is as big as its text);
* refuses to walk, compare or sort a value over the size limit that repeats references
  (`_WALK`);
* estimates what the filters that can grow far beyond their input (`_ESTIMATES`:
  `center`, `indent`, `replace`, `join`, `format`, `wordwrap`, `batch` and `slice` with
  a fill, `urlize`, `tojson` with an indent, `pprint`, `sum` of lists) would build, before
  they build it;
* charges what was built, refusing text over the limit and integers over theirs, and makes
  an iterator a filter returns (`map`, `select`, `batch`, ...) take a step per item.

Every wrapper takes the template context (`pass_context`), which also keeps Jinja from
calling filters at compile time to fold constants, outside any budget.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jinja2 import pass_context
from jinja2.filters import make_attrgetter
from jinja2.runtime import Context

from noetl.dsl import growth
from noetl.dsl.template_limits import (
    MAX_INT_DIGITS,
    MAX_RANGE,
    Budget,
    current,
    int_too_big,
    ticking,
    too_big,
)
from noetl.errors import TemplateError

Estimate = Callable[[Budget, Mapping[str, Any]], int]


def _text_len(budget: Budget, value: Any) -> int:
    return len(value) if isinstance(value, str) else budget.text_ok(value).chars


def _center(budget: Budget, a: Mapping[str, Any]) -> int:
    return max(_text_len(budget, a["value"]), growth.as_int(a["width"]))


def _indent(budget: Budget, a: Mapping[str, Any]) -> int:
    text = a["s"] if isinstance(a["s"], str) else str(a["s"])
    width = a["width"]
    step = len(width) if isinstance(width, str) else growth.as_int(width)
    return len(text) + (text.count("\n") + 1) * step


def _replace(budget: Budget, a: Mapping[str, Any]) -> int:
    subject = a["s"] if isinstance(a["s"], str) else str(a["s"])
    count = a["count"]
    kwargs = {} if count is None else {"count": count}
    return growth.replace_size(subject, [str(a["old"]), str(a["new"])], kwargs)


def _join(budget: Budget, a: Mapping[str, Any]) -> int:
    items = a["value"]
    sep = a["d"] if isinstance(a["d"], str) else str(a["d"])
    count = len(items) if isinstance(items, list | tuple) else 0
    return budget.text_ok(items).chars + len(sep) * max(count - 1, 0)


def _format(budget: Budget, a: Mapping[str, Any]) -> int:
    value = a["value"] if isinstance(a["value"], str) else str(a["value"])
    return growth.percent(budget, value, a["kwargs"] or tuple(a["args"]))


def _wordwrap(budget: Budget, a: Mapping[str, Any]) -> int:
    text = a["s"] if isinstance(a["s"], str) else ""
    wrap = a["wrapstring"]
    wrap_len = len(wrap) if isinstance(wrap, str) else 1
    width = max(growth.as_int(a["width"]), 1)
    lines = len(text) // width + len(text.split()) + text.count("\n") + 1
    return len(text) + lines * wrap_len


def _fill(budget: Budget, count: Any, fill: Any) -> int:
    """`batch` and `slice` make `count` lists, padded with `fill` when one is given."""
    number = growth.as_int(count)
    if number > MAX_RANGE:
        raise TemplateError(f"template asks for {number} parts, over the limit of {MAX_RANGE}")
    if fill is None:
        return number
    return number * (budget.text_ok(fill).chars + 1)


def _batch(budget: Budget, a: Mapping[str, Any]) -> int:
    return _fill(budget, a["linecount"], a["fill_with"])


def _slice(budget: Budget, a: Mapping[str, Any]) -> int:
    return _fill(budget, a["slices"], a["fill_with"])


def _urlize(budget: Budget, a: Mapping[str, Any]) -> int:
    # A word that may be a link (it has a dot, an @ or a colon) becomes an <a> element.
    text = a["value"] if isinstance(a["value"], str) else ""
    extra = sum(len(str(a[k])) for k in ("target", "rel") if a[k] is not None)
    links = sum(1 for word in text.split() if "." in word or "@" in word or ":" in word)
    return 2 * len(text) + links * (extra + 64)


def _tojson(budget: Budget, a: Mapping[str, Any]) -> int:
    size = budget.text_ok(a["value"])
    indent = a["indent"]
    if not indent:
        return size.chars
    step = len(indent) if isinstance(indent, str) else growth.as_int(indent)
    return size.chars + size.nodes * (size.depth + 1) * step


def _pprint(budget: Budget, a: Mapping[str, Any]) -> int:
    size = budget.text_ok(a["value"])
    return size.chars + size.nodes * (size.depth + 1)


def _sum(budget: Budget, a: Mapping[str, Any]) -> int:
    items, start = a["iterable"], a["start"]
    if isinstance(start, list | tuple) and isinstance(items, list | tuple):
        # Python adds sequences one by one, copying the total each time: charge the copies.
        total = budget.text_ok([start, items]).chars
        budget.charge(total * len(items))
        return total
    return 0


def _striptags(budget: Budget, a: Mapping[str, Any]) -> int:
    text = str(a["value"])
    budget.tick(growth.striptags_steps(text))
    return len(text)


def _round(budget: Budget, a: Mapping[str, Any]) -> int:
    # round(value, -n) and the ceil and floor methods compute 10 ** n.
    precision = a["precision"]
    if isinstance(precision, int) and abs(precision) > MAX_INT_DIGITS:
        raise TemplateError(int_too_big())
    return 0


_ESTIMATES: dict[str, Estimate] = {
    "center": _center,
    "indent": _indent,
    "replace": _replace,
    "join": _join,
    "format": _format,
    "wordwrap": _wordwrap,
    "batch": _batch,
    "slice": _slice,
    "urlize": _urlize,
    "tojson": _tojson,
    "pprint": _pprint,
    "sum": _sum,
    "round": _round,
    "striptags": _striptags,
}
# Filters that turn their input into text.
_TEXT = frozenset(
    {
        "capitalize",
        "center",
        "e",
        "escape",
        "forceescape",
        "format",
        "indent",
        "lower",
        "pprint",
        "replace",
        "safe",
        "string",
        "striptags",
        "title",
        "tojson",
        "trim",
        "truncate",
        "upper",
        "urlencode",
        "urlize",
        "wordcount",
        "wordwrap",
        "xmlattr",
    }
)
# Filters (and tests) that compare or hash the elements of their input.
_WALK = frozenset({"dictsort", "groupby", "max", "min", "sort", "unique", "sum"})
_COMPARE_TESTS = frozenset(
    {"!=", "<", "<=", "==", ">", ">=", "eq", "equalto", "ge", "greaterthan", "gt", "in"}
    | {"le", "lessthan", "lt", "ne"}
)
# Filters that return (a part of) their input rather than build something.
_READS = frozenset({"attr", "d", "default", "first", "last", "max", "min"})
# Steps per character (or element) scanned, over the plain rate, for filters that loop in
# Python over their input rather than in C.
_WEIGHT: dict[str, int] = {
    # text, per character (64 is a step per character)
    "wordwrap": 128,
    "urlize": 128,
    "striptags": 32,
    "title": 16,
    "urlencode": 4,
    "wordcount": 2,
    "indent": 2,
    # collections, per element (8 is a step per element)
    "pprint": 64,
    "groupby": 16,
    "tojson": 8,
    "xmlattr": 8,
    "dictsort": 8,
    "sort": 8,
    "unique": 8,
    "min": 8,
    "max": 8,
    "batch": 4,
    "slice": 4,
    "join": 2,
}
# What calling a filter or test costs, before what it scans.
_CALL_STEPS = 3
# Filters and globals left out: their output is random, so a template using them would
# not decide the same way twice (and `lipsum` writes as much text as it is asked for).
REMOVED_FILTERS = ("random",)


def _scanned(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    """Characters' worth of input an operation scans: text by its length, a collection at
    8 characters per element."""
    total = 0
    for value in (*args, *kwargs.values()):
        if isinstance(value, str | bytes):
            total += len(value)
        elif isinstance(value, list | tuple | dict | set | frozenset):
            total += 8 * len(value)
    return total


def _bind(
    signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any] | None:
    """The filter's arguments by name, defaults included (None if they do not fit)."""
    if signature is None:
        return None
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None  # the filter itself will say what is wrong with its arguments
    bound.apply_defaults()
    return dict(bound.arguments)


_PASSED = frozenset({"context", "ctx", "eval_ctx", "environment", "env"})


def _signature(func: Callable[..., Any], pass_arg: str | None) -> inspect.Signature | None:
    """The parameters a template passes to a filter (not the context Jinja passes first;
    a filter with an async variant shows the parameters of its sync one, which may not
    take it)."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return None
    if pass_arg and params and params[0].name in _PASSED:
        params = params[1:]
    return inspect.Signature(params)


_ITEMS = {"join": "value", "sum": "iterable"}


def _items_first(context: Context, name: str, bound: dict[str, Any]) -> None:
    """`join` and `sum` with their items (each item's `attribute`, if given) listed first,
    so what they would build can be measured before they build it."""
    key = _ITEMS[name]
    items = bound[key]
    if bound.get("attribute") is not None:
        items = map(make_attrgetter(context.environment, bound["attribute"]), items)
        bound["attribute"] = None
    bound[key] = items if isinstance(items, list | tuple) else list(items)


def _after(budget: Budget, name: str, result: Any) -> Any:
    if name in _READS:
        return result
    if isinstance(result, str | bytes):
        budget.built(len(result))
    elif isinstance(result, bool):
        pass
    elif isinstance(result, int):
        budget.integer(result)
    elif isinstance(result, list | tuple | dict):
        budget.charge(8 * len(result))
    elif isinstance(result, Iterator):
        return ticking(result)
    return result


class _Limited:
    """A filter or test under the render's budget (see the module docstring)."""

    def __init__(self, name: str, func: Callable[..., Any], *, is_filter: bool) -> None:
        self.name = name
        self.func = func
        self.is_filter = is_filter
        self.pass_arg = getattr(getattr(func, "jinja_pass_arg", None), "name", None)
        self.signature = _signature(func, self.pass_arg)
        self.estimate = _ESTIMATES.get(name) if is_filter else None
        self.weight = _WEIGHT.get(name, 1) if is_filter else 1
        self.text = is_filter and name in _TEXT
        self.walk = name in _WALK if is_filter else name in _COMPARE_TESTS
        self.__name__ = getattr(func, "__name__", name)
        self.__doc__ = func.__doc__

    def __call__(self, context: Context, *args: Any, **kwargs: Any) -> Any:
        budget = current()
        if budget is None:
            return self._call(context, args, kwargs)
        # A call costs a few steps (Jinja's dispatch and this wrapper); the input is scanned
        # at the filter's own rate, its other arguments at the plain one.
        budget.tick(_CALL_STEPS - 1)
        budget.charge(_scanned(args[:1], {}) * self.weight + _scanned(args[1:], kwargs))
        if self.text and args and not isinstance(args[0], str):
            budget.text_ok(args[0])
        if self.walk:
            for value in args:
                if isinstance(value, list | tuple | dict):
                    budget.value_ok(value)
        if self.estimate is not None:
            args, kwargs = self._estimate(budget, context, args, kwargs)
        result = self._call(context, args, kwargs)
        return _after(budget, self.name, result) if self.is_filter else result

    def _estimate(
        self, budget: Budget, context: Context, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Refuse a call that would build a value over the size limit; returns the
        arguments to call with (`join` and `sum` get their items listed)."""
        assert self.estimate is not None
        bound = _bind(self.signature, args, kwargs)
        if bound is None:
            return args, kwargs
        if self.name in _ITEMS:
            _items_first(context, self.name, bound)
            args, kwargs = (), bound
        if self.estimate(budget, bound) > budget.max_output:
            raise TemplateError(too_big(budget.max_output))
        return args, kwargs

    def _call(self, context: Context, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.pass_arg == "context":
            return self.func(context, *args, **kwargs)
        if self.pass_arg == "eval_context":
            return self.func(context.eval_ctx, *args, **kwargs)
        if self.pass_arg == "environment":
            return self.func(context.environment, *args, **kwargs)
        return self.func(*args, **kwargs)


def wrap(name: str, func: Callable[..., Any], *, is_filter: bool) -> Callable[..., Any]:
    """`func` (a filter or a test named `name`) under the render's budget."""
    return pass_context(_Limited(name, func, is_filter=is_filter))


def wrap_all(filters: dict[str, Any], tests: dict[str, Any]) -> None:
    """Wrap every filter and test in place (and drop the random ones)."""
    for name in REMOVED_FILTERS:
        filters.pop(name, None)
    for name, func in list(filters.items()):
        filters[name] = wrap(name, func, is_filter=True)
    for name, func in list(tests.items()):
        tests[name] = wrap(name, func, is_filter=False)
