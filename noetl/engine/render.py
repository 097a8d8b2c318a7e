"""Rendering templates in Jinja2's immutable sandbox, with limits on time and size.

* A value that is exactly one `{{ expression }}` keeps its native type (a list stays a list);
  text mixed with expressions renders as a string; dicts and lists are rendered recursively.
  A native value must be data, because it goes into events: tuples, ranges and the lazy
  sequences of filters such as `map` become lists, map keys become strings as JSON would
  make them, and anything else (a function, a method) is a template error.
* Limits: a render may take at most `time_limit_s` (checked on every call, attribute
  access, operator and `range` step inside the template) and produce at most `max_output`
  characters (checked as the output grows); `*` and `**` are checked before they build
  something huge.
* Errors become `TemplateError` with a short message; the engine turns them into a failed
  step, never a crash.
"""

from __future__ import annotations

import itertools
import json
import operator
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from jinja2 import StrictUndefined, Undefined, nodes
from jinja2 import TemplateError as JinjaTemplateError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from noetl.dsl.kinds import LITERAL_SPEC_FIELDS
from noetl.errors import TemplateError

DEFAULT_TIME_LIMIT_S = 1.0
DEFAULT_MAX_OUTPUT = 1_000_000
_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>.*?)\}\}\s*$", re.DOTALL)
_MAX_RANGE = 100_000


class _Budget:
    __slots__ = ("deadline", "time_limit_s")

    def __init__(self, time_limit_s: float) -> None:
        self.time_limit_s = time_limit_s
        self.deadline = 0.0

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateError(f"template took longer than {self.time_limit_s:g}s to render")


class LimitedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with a time budget and size checks on `*` and `**`."""

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, budget: _Budget, max_output: int) -> None:
        super().__init__(
            autoescape=False,
            keep_trailing_newline=True,
            undefined=StrictUndefined,
            finalize=_no_nested_undefined,
        )
        self.budget = budget
        self.max_output = max_output
        self.globals["range"] = self._range

    def _range(self, *args: int) -> Iterator[int]:
        rng = range(*args)
        if len(rng) > _MAX_RANGE:
            raise TemplateError(f"range() of {len(rng)} items is over the limit of {_MAX_RANGE}")
        for index, value in enumerate(rng):
            if index % 256 == 0:
                self.budget.check()
            yield value

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        self.budget.check()
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.budget.check()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.budget.check()
        return super().getitem(obj, argument)

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        self.budget.check()
        if operator_name == "*":
            for seq, count in ((left, right), (right, left)):
                sized = isinstance(seq, str | list | tuple) and isinstance(count, int)
                if sized and len(seq) * count > self.max_output:
                    raise TemplateError("template builds a value over the size limit")
            return operator.mul(left, right)
        if isinstance(right, int) and isinstance(left, int) and abs(right) > 10_000:
            raise TemplateError("exponent over the limit of 10000")
        return operator.pow(left, right)


class Renderer:
    """Compiles (with a cache) and renders templates against a context mapping."""

    def __init__(
        self,
        *,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        max_output: int = DEFAULT_MAX_OUTPUT,
        globals: Mapping[str, Any] | None = None,
    ) -> None:
        self._budget = _Budget(time_limit_s)
        self.env = LimitedEnvironment(self._budget, max_output)
        if globals:
            self.env.globals.update(globals)
        self.max_output = max_output
        self._expressions: dict[str, Callable[..., Any]] = {}
        self._templates: dict[str, Any] = {}
        self._single: dict[str, str | None] = {}

    def render(self, value: Any, context: Mapping[str, Any]) -> Any:
        """Render a value (str, dict or list, recursively); other values pass through."""
        self._budget.deadline = time.monotonic() + self._budget.time_limit_s
        return self._render(value, context)

    def _render(self, value: Any, context: Mapping[str, Any]) -> Any:
        if isinstance(value, str):
            return self._render_str(value, context) if "{" in value else value
        if isinstance(value, dict):
            return {k: self._render(v, context) for k, v in value.items()}
        if isinstance(value, list):
            return [self._render(v, context) for v in value]
        return value

    def _render_str(self, text: str, context: Mapping[str, Any]) -> Any:
        if "{{" not in text and "{%" not in text and "{#" not in text:
            return text
        try:
            expr = self._single_expression(text)
            if expr is not None:
                result = self._expression(expr)(**context)
                if isinstance(result, StrictUndefined):
                    str(result)  # raises UndefinedError with the name
                return _check_size(_to_data(result, self.max_output), self.max_output)
            template = self._templates.get(text)
            if template is None:
                template = self.env.from_string(text)
                self._templates[text] = template
            return self._render_chunks(template, context)
        except TemplateError:
            raise
        except SecurityError as exc:
            raise TemplateError(f"not allowed in templates: {exc}") from None
        except JinjaTemplateError as exc:
            raise TemplateError(_describe(exc)) from None
        except RecursionError:
            raise TemplateError("template recursion is too deep") from None
        except Exception as exc:  # user expressions can raise anything (1/0, bad types)
            raise TemplateError(f"{type(exc).__name__}: {exc}") from None

    def _render_chunks(self, template: Any, context: Mapping[str, Any]) -> str:
        """Render text, checking the output size as it grows (not once it is all built)."""
        chunks: list[str] = []
        size = 0
        for chunk in template.generate(context):
            size += len(chunk)
            if size > self.max_output:
                raise TemplateError(
                    f"template output is over the limit of {self.max_output} characters"
                )
            chunks.append(chunk)
        return "".join(chunks)

    def _single_expression(self, text: str) -> str | None:
        """The expression of a text that is exactly one `{{ expression }}`, else None."""
        if text in self._single:
            return self._single[text]
        match = _SINGLE_EXPR.match(text)
        expr = match.group("expr") if match else None
        if expr is not None and ("{{" in expr or "}}" in expr):
            # `{{ {'a': {'b': 1}} }}` (one expression) or `{{ a }} {{ b }}` (two): parse it
            body = self.env.parse(text).body
            parts = body[0].nodes if len(body) == 1 and isinstance(body[0], nodes.Output) else []
            parts = [
                p for p in parts if not (isinstance(p, nodes.TemplateData) and not p.data.strip())
            ]
            if len(parts) != 1 or isinstance(parts[0], nodes.TemplateData):
                expr = None
        self._single[text] = expr
        return expr

    def _expression(self, source: str) -> Callable[..., Any]:
        compiled = self._expressions.get(source)
        if compiled is None:
            compiled = self.env.compile_expression(source, undefined_to_none=False)
            self._expressions[source] = compiled
        return compiled

    def truthy(self, value: Any, context: Mapping[str, Any]) -> bool:
        """Render a condition and read it as a boolean (`"false"`, `"0"`, `""` are false)."""
        return to_bool(self.render(value, context))


def render_spec(
    renderer: Renderer, kind: str, spec: Mapping[str, Any], context: Mapping[str, Any]
) -> dict[str, Any]:
    """A tool's spec with its templates rendered, except the fields of its kind that are
    taken literally (`LITERAL_SPEC_FIELDS`: code and SQL)."""
    literal = LITERAL_SPEC_FIELDS.get(kind, frozenset())
    return {
        key: value if key in literal else renderer.render(value, context)
        for key, value in spec.items()
    }


_FALSE_WORDS = frozenset({"", "false", "0", "no", "off", "none", "null"})


def to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_WORDS
    return bool(value)


def _to_data(value: Any, limit: int) -> Any:
    """A native template value as JSON data (what an event can carry), or TemplateError."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {_data_key(k): _to_data(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_data(v, limit) for v in value]
    if isinstance(value, Iterable) and not isinstance(value, bytes | bytearray):
        items = list(itertools.islice(value, limit + 1))  # range, generators, dict views
        if len(items) > limit:
            raise TemplateError(f"template value has more than {limit} items")
        return [_to_data(v, limit) for v in items]
    raise TemplateError(
        f"template value is a {type(value).__name__}, not data "
        "(a string, number, boolean, null, list or map)"
    )


def _no_nested_undefined(value: Any) -> Any:
    """Jinja `finalize`: an undefined name inside a list or map printed in text is an error
    (printing the container would show `Undefined` instead of raising)."""
    items: list[Any] = []
    if isinstance(value, Mapping):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple):
        items = list(value)
    for item in items:
        if isinstance(item, Undefined):
            str(item)  # StrictUndefined: raises UndefinedError with the name
        _no_nested_undefined(item)
    return value


def _data_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)  # as JSON writes it: 1 -> "1", True -> "true"
    raise TemplateError(f"a map key must be a string or a number, not a {type(key).__name__}")


def _check_size(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        raise TemplateError(f"template output is over the limit of {limit} characters")
    return value


def _describe(exc: JinjaTemplateError) -> str:
    message = exc.message or type(exc).__name__
    if type(exc).__name__ == "UndefinedError":
        return f"undefined value: {message}"
    return message
