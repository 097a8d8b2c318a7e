"""What one template render may cost: a budget of steps, sizes measured as JSON, integers.

A render must stop, with a clear error, before it can hold a process: a single C-level
operation (`(10 ** 10000) ** 10000`, `'x'.center(2000000000)`) holds the interpreter lock
for minutes or allocates gigabytes, and a loop of cheap operations can run for hours. So:

* **Steps.** Every operation a template performs (a call, an attribute or item read, an
  operator, a filter or test, a loop iteration, a piece of output) takes steps from the
  render's `Budget`; one that builds or scans a value takes one more step per
  `CHARS_PER_STEP` characters of it (measured as below), so the steps bound both the CPU a
  render uses and what it allocates in total. Steps are counted, never timed: the same
  template over the same data always stops at the same place, so a log replays to the same
  outcome.
* **Sizes.** A value is as big as its JSON text: a list that repeats a reference to a big
  string is as big as the string times the repetitions (`measure`), which is what writing
  it (into an event, an output, `tojson`) would cost. What a template builds is limited
  to `max_output` characters, and the growth is estimated before it happens (`*`,
  `center`, `replace`, `format` widths, ...: `noetl.dsl.growth`).
* **Integers** are limited to `MAX_INT_DIGITS` digits (what Python prints), estimated before
  `*` and `**`.

The budget of the render in progress is a context variable, so renders on different
threads (the API's and the orchestrator's, which share engines) never share one.
"""

from __future__ import annotations

import math
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jinja2 import Undefined
from jinja2.utils import Cycler, Namespace

from noetl.errors import TemplateError

MAX_STEPS = 1_000_000
MAX_OUTPUT = 1_000_000
MAX_RANGE = 100_000
MAX_INT_DIGITS = 4300  # Python's own limit for printing an int (sys.get_int_max_str_digits)
MAX_INT_BITS = int(MAX_INT_DIGITS * math.log2(10))
CHARS_PER_STEP = 64
# A string at least this long met twice in one value is a repeated reference (shorter ones
# are often shared by Python itself: JSON keys, interned names), and so is any container.
_SHARED_STR = 256
_ENDLESS = 10**18


class Budget:
    """The steps and the output one render may use; raises TemplateError past a limit."""

    __slots__ = ("max_output", "max_steps", "steps", "written")

    def __init__(self, max_steps: int = MAX_STEPS, max_output: int = MAX_OUTPUT) -> None:
        self.max_steps = max_steps
        self.max_output = max_output
        self.steps = 0
        self.written = 0  # characters of text output, captured blocks included

    def tick(self, steps: int = 1) -> None:
        self.steps += steps
        if self.steps > self.max_steps:
            raise TemplateError(
                f"template went over the limit of {self.max_steps} steps "
                "(operations, loop iterations and output count)"
            )

    def charge(self, chars: int) -> None:
        """Steps for building or scanning `chars` characters' worth of a value."""
        self.tick(1 + chars // CHARS_PER_STEP)

    def fits(self, chars: int) -> None:
        """Refuse to build a value of `chars` characters over the size limit."""
        if chars > self.max_output:
            raise TemplateError(too_big(self.max_output))

    def built(self, chars: int) -> None:
        """A value of `chars` characters was just built: refuse it over the size limit,
        and charge it."""
        self.fits(chars)
        self.charge(chars)

    def write(self, chars: int) -> None:
        """`chars` characters of text output."""
        self.written += chars
        if self.written > self.max_output:
            raise TemplateError(output_too_big(self.max_output))
        self.charge(chars)
        self.tick()  # a piece of output is converted, checked and yielded

    def printable(self, value: Any) -> None:
        """Measure a value about to be written as text: it must fit what output is left."""
        size = measure(value)
        self.tick(size.nodes)
        if self.written + size.chars > self.max_output:
            raise TemplateError(output_too_big(self.max_output))

    def value_ok(self, value: Any) -> Size:
        """Measure a value that an operation is about to walk (compare, sort, return):
        over the size limit, it must not repeat references, which would make it far
        bigger than the memory it holds. A step per part walked."""
        size = measure(value)
        self.tick(size.nodes)
        if size.chars > self.max_output and size.shared:
            raise TemplateError(too_big(self.max_output) + " (counting repeated references)")
        return size

    def text_ok(self, value: Any) -> Size:
        """Measure a value about to be turned into text: it must fit the size limit."""
        size = measure(value)
        self.tick(size.nodes)
        if size.chars > self.max_output:
            raise TemplateError(too_big(self.max_output))
        return size

    def integer(self, value: int) -> None:
        if value.bit_length() > MAX_INT_BITS:
            raise TemplateError(int_too_big())


def too_big(limit: int) -> str:
    return f"template builds a value over the limit of {limit} characters"


def output_too_big(limit: int) -> str:
    return f"template output is over the limit of {limit} characters"


def int_too_big() -> str:
    return f"template builds an integer over the limit of {MAX_INT_DIGITS} digits"


_CURRENT: ContextVar[Budget | None] = ContextVar("noetl_template_budget", default=None)


def current() -> Budget | None:
    """The budget of the render in progress on this thread; None outside a render (when
    Jinja folds constants while compiling, which only ever sees the template's text)."""
    return _CURRENT.get()


def activate(budget: Budget) -> Any:
    """Make `budget` current; returns the token `deactivate` takes."""
    return _CURRENT.set(budget)


def deactivate(token: Any) -> None:
    _CURRENT.reset(token)


def ticking(iterable: Iterable[Any]) -> Iterator[Any]:
    """Iterate, taking a step per item from the current budget."""
    for item in iterable:
        budget = _CURRENT.get()
        if budget is not None:
            budget.tick()
        yield item


# --- sizes ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Size:
    """A value measured as JSON: `chars` counts every occurrence of a repeated reference;
    `nodes` is how many distinct parts were visited; `shared` whether any part (a container,
    a long string) was met more than once; `depth` the deepest nesting."""

    chars: int
    nodes: int
    shared: bool
    depth: int


class _Walk:
    __slots__ = ("depth", "keep", "memo", "shared", "strings", "visits")

    def __init__(self) -> None:
        self.visits = 0
        self.memo: dict[int, int] = {}
        self.strings: set[int] = set()
        # Parts built while walking (a StepNamespace entry) stay alive, so no id is reused.
        self.keep: list[Any] = []
        self.shared = False
        self.depth = 0

    def size(self, value: Any, depth: int) -> int:
        self.visits += 1
        kind = type(value)
        if kind is str or kind is bytes:
            if len(value) >= _SHARED_STR:
                self._long_string(value)
            return len(value) + 2
        if kind is int:
            return digits(value)
        if value is None or kind is bool or kind is float:
            return 5
        if kind is not list and kind is not dict and kind is not tuple:
            return self._other(value, depth)
        key = id(value)
        known = self.memo.get(key)
        if known is not None:
            self.shared = True
            return known
        self.keep.append(value)
        self.depth = max(self.depth, depth)
        return self._walk(key, value, depth)

    def _walk(self, key: int, value: Any, depth: int) -> int:
        # A value that contains itself (`{% set ns.x = ns %}`) would be endless text.
        self.memo[key] = _ENDLESS
        total = self._container(value, depth + 1)
        self.memo[key] = total
        return total

    def _long_string(self, value: Any) -> None:
        if id(value) in self.strings:
            self.shared = True
        self.strings.add(id(value))
        self.keep.append(value)

    def _other(self, value: Any, depth: int) -> int:
        """A value of any other type: a subclass of str (a secret reference, Markup), of
        int, a mapping that is not a dict, a namespace, or something that prints short."""
        if isinstance(value, str | bytes | bytearray):
            if len(value) >= _SHARED_STR:
                self._long_string(value)
            return len(value) + 2
        if isinstance(value, int):
            return digits(value)
        if isinstance(value, Undefined):
            return 0
        if isinstance(value, Namespace):
            value = object.__getattribute__(value, "_Namespace__attrs")
        elif isinstance(value, Cycler):
            value = value.items
        elif isinstance(value, KeysView | ValuesView | ItemsView):
            value = getattr(value, "mapping", None) or {}  # a dict's view: as big as it
        elif not isinstance(value, Mapping | list | tuple | set | frozenset):
            return 8  # prints as a short name (a function, a range, a loop)
        key = id(value)
        known = self.memo.get(key)
        if known is not None:
            self.shared = True
            return known
        self.keep.append(value)
        return self._walk(key, value, depth)

    def _container(self, value: Any, depth: int) -> int:
        total = 2
        size = self.size
        if isinstance(value, Mapping):
            for k, v in value.items():
                total += size(k, depth) + size(v, depth) + 2
        else:
            for item in value:
                total += size(item, depth) + 1
        return total


def digits(value: int) -> int:
    """About how many characters an int prints as (without printing it)."""
    return (value.bit_length() * 1233 >> 12) + 2


def measure(value: Any) -> Size:
    """The size of `value` as JSON text (see `Size`); walks each distinct part once."""
    walk = _Walk()
    chars = walk.size(value, 0)
    return Size(chars, walk.visits, walk.shared, walk.depth)


def int_bits_of_product(left: int, right: int) -> int:
    """At least how many bits `left * right` has."""
    if not left or not right:
        return 0
    return left.bit_length() + right.bit_length() - 1


def int_bits_of_power(base: int, exponent: int) -> float:
    """About how many bits `base ** exponent` has (0 when it cannot grow)."""
    if exponent <= 1 or abs(base) <= 1:
        return 0.0
    return exponent * math.log2(abs(base))
