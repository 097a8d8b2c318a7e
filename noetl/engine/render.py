"""Rendering templates in Jinja2's immutable sandbox, with limits on time and size.

* A value that is exactly one `{{ expression }}` keeps its native type (a list stays a list);
  text mixed with expressions renders as a string; dicts and lists are rendered recursively.
* Limits: a render may take at most `time_limit_s` (checked on every call, attribute
  access, operator and `range` step inside the template) and produce at most `max_output`
  characters; `*` and `**` are checked before they build something huge.
* Errors become `TemplateError` with a short message; the engine turns them into a failed
  step, never a crash.
"""

from __future__ import annotations

import operator
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jinja2 import StrictUndefined
from jinja2 import TemplateError as JinjaTemplateError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

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
        super().__init__(autoescape=False, keep_trailing_newline=True, undefined=StrictUndefined)
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
            match = _SINGLE_EXPR.match(text)
            if match and "{{" not in match.group("expr") and "}}" not in match.group("expr"):
                result = self._expression(match.group("expr"))(**context)
                if isinstance(result, StrictUndefined):
                    str(result)  # raises UndefinedError with the name
                return _check_size(result, self.max_output)
            template = self._templates.get(text)
            if template is None:
                template = self.env.from_string(text)
                self._templates[text] = template
            return _check_size(template.render(context), self.max_output)
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

    def _expression(self, source: str) -> Callable[..., Any]:
        compiled = self._expressions.get(source)
        if compiled is None:
            compiled = self.env.compile_expression(source, undefined_to_none=False)
            self._expressions[source] = compiled
        return compiled

    def truthy(self, value: Any, context: Mapping[str, Any]) -> bool:
        """Render a condition and read it as a boolean (`"false"`, `"0"`, `""` are false)."""
        return to_bool(self.render(value, context))


_FALSE_WORDS = frozenset({"", "false", "0", "no", "off", "none", "null"})


def to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_WORDS
    return bool(value)


def _check_size(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        raise TemplateError(f"template output is over the limit of {limit} characters")
    return value


def _describe(exc: JinjaTemplateError) -> str:
    message = exc.message or type(exc).__name__
    if type(exc).__name__ == "UndefinedError":
        return f"undefined value: {message}"
    return message
