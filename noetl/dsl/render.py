"""Rendering templates in Jinja2's immutable sandbox, with limits on steps and size.

* A value that is exactly one `{{ expression }}` keeps its native type (a list stays a list);
  text mixed with expressions renders as a string; dicts and lists are rendered recursively.
  A native value must be data, because it goes into events: tuples, ranges and the lazy
  sequences of filters such as `map` become lists, map keys become strings as JSON would
  make them, and anything else (a function, a method) is a template error.
* Limits (`noetl.dsl.template_limits`, enforced by `noetl.dsl.sandbox`): one `render` may take
  at most `max_steps` steps (operations, loop iterations and output count; never time, so
  the same template over the same data always stops at the same place), build values and
  write text of at most `max_output` characters, and integers of at most 4300 digits; what
  would break a limit is refused before it is built.
* No wall clock: a render's cost is counted in steps, never timed, and nothing here reads
  a clock, the environment or a global other than the budget of the render in progress. A
  render is a function of its template and its data, so a replayed log renders the same.
* Errors become `TemplateError` with a short message naming the field (`args.url: ...`);
  the engine turns them into a failed step, never a crash.

It lives in the DSL, next to `noetl.dsl.templates`, because the engine is not its only
user: the worker (policy rules, a task's pipeline), the sinks and the script runner render
too, and none of them needs the engine for it.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from jinja2 import StrictUndefined, nodes
from jinja2 import TemplateError as JinjaTemplateError
from jinja2.exceptions import SecurityError

from noetl.dsl.envelope import StepResult
from noetl.dsl.kinds import LITERAL_SPEC_FIELDS
from noetl.dsl.sandbox import LimitedEnvironment
from noetl.dsl.template_limits import (
    MAX_OUTPUT,
    MAX_STEPS,
    Budget,
    activate,
    current,
    deactivate,
    digits,
    output_too_big,
    too_big,
)
from noetl.errors import TemplateError, UndefinedNameError

DEFAULT_MAX_STEPS = MAX_STEPS
DEFAULT_MAX_OUTPUT = MAX_OUTPUT
_SINGLE_EXPR = re.compile(r"^\s*\{\{(?P<expr>.*?)\}\}\s*$", re.DOTALL)
_MAX_MESSAGE = 500  # an error message quotes user data at most this long
# `name` or `name.key.key`: read straight from the context when every part is a plain
# dict's key (what Jinja, data before attributes, would read), without building a context.
_PATH = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\s*$")
_MISS = object()
# Compiled templates and parsed expressions a renderer keeps, per kind: a long-lived one
# (the sinks', a schedule's) sees the templates of every playbook a process ever runs.
DEFAULT_CACHE_SIZE = 4096
V = TypeVar("V")


def _remember(cache: dict[str, V], key: str, value: V, limit: int) -> None:
    """Keep `value` under `key`, dropping the oldest entry once `cache` holds `limit`."""
    if len(cache) >= limit:
        del cache[next(iter(cache))]
    cache[key] = value


class Renderer:
    """Compiles (with a cache) and renders templates against a context mapping.

    The cache keeps at most `cache_size` entries of each kind (compiled templates,
    expressions, and what a text was found to be), the oldest dropped first: a text seen
    again after its entry went is compiled again, never rendered differently."""

    def __init__(
        self,
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_output: int = DEFAULT_MAX_OUTPUT,
        globals: Mapping[str, Any] | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        if cache_size < 1:
            raise ValueError("cache_size must be at least 1")
        self.cache_size = cache_size
        self.env = LimitedEnvironment()
        if globals:
            self.env.globals.update(globals)
        self.max_steps = max_steps
        self.max_output = max_output
        self._expressions: dict[str, Callable[..., Any]] = {}
        self._templates: dict[str, Any] = {}
        self._single: dict[str, str | None] = {}
        self._paths: dict[str, tuple[str, ...] | None] = {}

    def render(self, value: Any, context: Mapping[str, Any], *, field: str = "") -> Any:
        """Render a value (str, dict or list, recursively); other values pass through.

        The whole value shares one budget of steps. A TemplateError names where in the
        value it happened, under `field` (`field="args"`: `args.url: ...`)."""
        token = activate(Budget(self.max_steps, self.max_output))
        try:
            return self._render(value, context, field)
        finally:
            deactivate(token)

    def _render(self, value: Any, context: Mapping[str, Any], path: str) -> Any:
        if isinstance(value, str):
            if "{" not in value:
                return value
            try:
                return self._render_str(value, context)
            except TemplateError as exc:
                raise type(exc)(f"{path}: {exc}" if path else str(exc)) from None
        if isinstance(value, dict):
            return {
                k: self._render(v, context, f"{path}.{k}" if path else str(k))
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._render(v, context, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    def _render_str(self, text: str, context: Mapping[str, Any]) -> Any:
        if "{{" not in text and "{%" not in text and "{#" not in text:
            return text
        budget = current()
        if budget is not None:
            budget.written = 0  # each template text may write up to the limit; steps are shared
        try:
            expr = self._single_expression(text)
            if expr is not None:
                return _check_size(
                    _to_data(self._value(expr, context), self.max_output), self.max_output
                )
            template = self._templates.get(text)
            if template is None:
                template = self.env.from_string(text)
                _remember(self._templates, text, template, self.cache_size)
            return self._render_chunks(template, context)
        except TemplateError as exc:
            raise type(exc)(_short(str(exc))) from None
        except SecurityError as exc:
            raise TemplateError(_short(f"not allowed in templates: {exc}")) from None
        except JinjaTemplateError as exc:
            error = UndefinedNameError if type(exc).__name__ == "UndefinedError" else TemplateError
            raise error(_short(_describe(exc))) from None
        except RecursionError:
            raise TemplateError("template recursion is too deep") from None
        except MemoryError:
            raise TemplateError("template ran out of memory") from None
        except Exception as exc:  # user expressions can raise anything (1/0, bad types)
            raise TemplateError(_short(f"{type(exc).__name__}: {exc}")) from None

    def _render_chunks(self, template: Any, context: Mapping[str, Any]) -> str:
        """Render text, checking the output size as it grows (not once it is all built)."""
        chunks: list[str] = []
        size = 0
        for chunk in template.generate(context):
            size += len(chunk)
            if size > self.max_output:  # also counted piece by piece (noetl.dsl.sandbox)
                raise TemplateError(output_too_big(self.max_output))
            chunks.append(chunk)
        return "".join(chunks)

    def _value(self, expr: str, context: Mapping[str, Any]) -> Any:
        """The value of one expression: a plain path read straight from `context`, any
        other through Jinja."""
        result = self._lookup(expr, context)
        if result is _MISS:
            result = self._expression(expr)(**context)
        if isinstance(result, StrictUndefined):
            str(result)  # raises UndefinedError with the name
        return result

    def _lookup(self, expr: str, context: Mapping[str, Any]) -> Any:
        """The value of a plain path expression read straight from `context`, or `_MISS`
        when it is not one, or a part is missing or not a plain dict's key (Jinja then
        evaluates it, with its own errors and attribute rules)."""
        if expr in self._paths:
            path = self._paths[expr]
        else:
            path = tuple(expr.strip().split(".")) if _PATH.match(expr) else None
            _remember(self._paths, expr, path, self.cache_size)
        if path is None:
            return _MISS
        value: Any = context
        for part in path:
            if type(value) is not dict and value is not context:
                return _MISS
            value = value.get(part, _MISS)
            if value is _MISS:
                return _MISS
        return value

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
        _remember(self._single, text, expr, self.cache_size)
        return expr

    def _expression(self, source: str) -> Callable[..., Any]:
        compiled = self._expressions.get(source)
        if compiled is None:
            made: Callable[..., Any] = self.env.compile_expression(source, undefined_to_none=False)
            _remember(self._expressions, source, made, self.cache_size)
            return made
        return compiled

    def truthy(
        self,
        value: Any,
        context: Mapping[str, Any],
        *,
        field: str = "",
        undefined_false: bool = False,
    ) -> bool:
        """Render a condition and read it as a boolean (`"false"`, `"0"`, `""` are false).
        `undefined_false`: a condition that reads an undefined name is false (upstream
        NoETL's reading), not an error."""
        try:
            return to_bool(self.render(value, context, field=field))
        except UndefinedNameError:
            if undefined_false:
                return False
            raise


def render_spec(
    renderer: Renderer,
    kind: str,
    spec: Mapping[str, Any],
    context: Mapping[str, Any],
    *,
    literal_code: bool = True,
) -> dict[str, Any]:
    """A tool's spec with its templates rendered, except the fields of its kind that are
    taken literally (`LITERAL_SPEC_FIELDS`: code and SQL). `literal_code=False` renders
    those too, as upstream NoETL does for the playbooks of its dialect."""
    literal = LITERAL_SPEC_FIELDS.get(kind, frozenset()) if literal_code else frozenset()
    return {
        key: value if key in literal else renderer.render(value, context, field=f"spec.{key}")
        for key, value in spec.items()
    }


_FALSE_WORDS = frozenset({"", "false", "0", "no", "off", "none", "null"})


def to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_WORDS
    return bool(value)


class _Data:
    """Copies a native template value as JSON data (what an event can carry), counting its
    size as JSON as it goes: a value that repeats references (the same list, a long string,
    an iterator's item) must stay under the size limit, since written out it would be that
    big; data that does not (a workload list) may be as big as it is."""

    __slots__ = ("chars", "keep", "limit", "seen", "shared", "visits")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chars = 0
        self.visits = 0
        self.seen: set[int] = set()
        self.keep: list[Any] = []  # parts an iterator made stay alive, so no id is reused
        self.shared = False

    def _count(self, chars: int) -> None:
        self.chars += chars
        if self.shared and self.chars > self.limit:
            raise TemplateError(too_big(self.limit) + " (counting repeated references)")

    def _enter(self, value: Any) -> None:
        if id(value) in self.seen:
            self.shared = True
        self.seen.add(id(value))
        self.keep.append(value)

    def copy(self, value: Any) -> Any:
        self.visits += 1
        if value is None or isinstance(value, bool | float):
            self._count(5)
            return value
        if isinstance(value, int):
            self._count(digits(value))
            return value
        if isinstance(value, str):
            if len(value) >= 256:
                self._enter(value)
            self._count(len(value) + 2)
            return value
        if isinstance(value, Mapping):
            self._enter(value)
            self._count(2)
            out: dict[str, Any] = {}
            for k, v in value.items():
                key = _data_key(k)
                self._count(len(key) + 4)
                out[key] = self.copy(v)
            return out
        if isinstance(value, list | tuple):
            self._enter(value)
            self._count(2)
            return [self._item(v) for v in value]
        if isinstance(value, Iterable) and not isinstance(value, bytes | bytearray):
            items = list(itertools.islice(value, self.limit + 1))  # range, generators, views
            if len(items) > self.limit:
                raise TemplateError(f"template value has more than {self.limit} items")
            self._count(2)
            return [self._item(v) for v in items]
        raise TemplateError(
            f"template value is a {type(value).__name__}, not data "
            "(a string, number, boolean, null, list or map)"
        )

    def _item(self, value: Any) -> Any:
        self._count(1)
        return self.copy(value)


def _to_data(value: Any, limit: int) -> Any:
    """A native template value as JSON data, or TemplateError (see `_Data`)."""
    data = _Data(limit)
    out = data.copy(value)
    budget = current()
    if budget is not None:
        # Copying happens once per template text, never in a loop: it costs what the data
        # is big, at a lower rate, so a big workload list can still be passed along.
        budget.tick(data.visits // 8)
    return out


def _data_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(key)  # as JSON writes it: 1 -> "1", True -> "true"
    raise TemplateError(f"a map key must be a string or a number, not a {type(key).__name__}")


def _check_size(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        raise TemplateError(output_too_big(limit))
    return value


def _short(message: str) -> str:
    """An error message of a reasonable length (it may quote user data)."""
    if len(message) <= _MAX_MESSAGE:
        return message
    return message[:_MAX_MESSAGE] + f"... ({len(message)} characters)"


def _describe(exc: JinjaTemplateError) -> str:
    message = exc.message or type(exc).__name__
    if type(exc).__name__ == "UndefinedError":
        # An upstream step result is a map like any other to its reader.
        message = message.replace(f"'{_STEP_RESULT} object'", "'dict object'")
        return f"undefined value: {message}"
    return message


_STEP_RESULT = f"{StepResult.__module__}.{StepResult.__name__}"
