"""How big a value an operation is about to build, estimated before it runs.

Each function returns an upper bound (in characters, as `noetl.dsl.template_limits.measure`
counts them) of what an operation would build from its arguments, cheaply, so an
operation that would build something huge (`'x'.center(2000000000)`,
`'{:>2000000000}'.format(1)`, `'%.1000000000f' % 1`) is refused before it allocates.
Only operations that can grow far beyond their inputs need one; everything a template
builds is measured again once built.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from noetl.dsl.template_limits import Budget

# The widths and precisions a number in a format string may name before it is "huge"
# (parsing a longer run of digits as an int would be work for nothing).
_HUGE = 10**18
_PERCENT = re.compile(
    r"%(?:\((?P<key>[^)]*)\))?[-#0 +]*(?P<width>\*|\d+)?(?:\.(?P<prec>\*|\d+))?[hlL]?(?P<type>.)",
    re.DOTALL,
)
_DIGITS = re.compile(r"\d+")


def _number(text: str) -> int:
    return _HUGE if len(text) > 18 else int(text)


def as_int(value: Any) -> int:
    """A value used as a width: an int, or the digits of a string (`'{:{}}'`)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return abs(value) if value.bit_length() < 60 else _HUGE
    if isinstance(value, str) and value.isdigit():
        return _number(value)
    return 0


def _text(budget: Budget, value: Any) -> int:
    """The length of `value` as text (measured; refused over the limit)."""
    if isinstance(value, str):
        return len(value)
    return budget.text_ok(value).chars


def percent(budget: Budget, fmt: str, args: Any) -> int:
    """`fmt % args`: the format's own text plus, per conversion, its width, its precision
    and the text of the value it converts."""
    matches = list(_PERCENT.finditer(fmt))
    if isinstance(args, tuple):
        values: Sequence[Any] = args
    elif isinstance(args, Mapping) and all(m.group("key") is not None for m in matches):
        values = list(args.values())  # `%(name)s`: one value each
    else:
        values = [args]  # one value, which a conversion without a key prints whole
    widest = max((_text(budget, v) for v in values), default=0)
    star = max((as_int(v) for v in values), default=0)
    total = len(fmt)
    for match in matches:
        for group in ("width", "prec"):
            text = match.group(group)
            if text == "*":
                total += star
            elif text:
                total += _number(text)
        if match.group("type") != "%":
            total += widest
    return total


def str_format(budget: Budget, fmt: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """`fmt.format(*args, **kwargs)`: per replacement field, the widest argument plus every
    number in its format spec (a nested field counts as the biggest argument)."""
    values = [*args, *kwargs.values()]
    widest = max((_text(budget, v) for v in values), default=0)
    biggest = max((as_int(v) for v in values), default=0)
    return _format_size(fmt, widest, biggest, depth=0)


def _format_size(fmt: str, widest: int, biggest: int, depth: int) -> int:
    total = 0
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return len(fmt)  # format() will raise the same error
    for literal, field, spec, _conversion in parsed:
        total += len(literal)
        if field is None:
            continue
        total += widest
        if spec:
            total += sum(_number(d) for d in _DIGITS.findall(spec))
            if "{" in spec and depth < 2:
                total += _format_size(spec, widest, biggest, depth + 1) + biggest
    return total


def striptags_steps(text: str) -> int:
    """The steps `striptags` takes: MarkupSafe removes tags one at a time, copying the rest
    of the text each time (about 8,192 characters copied a step)."""
    return text.count("<") * len(text) // 8192


# --- str (and bytes) methods ------------------------------------------------------------


def _width(args: Sequence[Any], kwargs: Mapping[str, Any], name: str = "width") -> int:
    value = args[0] if args else kwargs.get(name, 0)
    return as_int(value) if isinstance(value, int) else 0


def replace_size(subject: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    if len(args) < 2:
        return len(subject)
    old, new = args[0], args[1]
    count = args[2] if len(args) > 2 else kwargs.get("count", -1)
    if not isinstance(old, str | bytes) or not isinstance(new, str | bytes):
        return len(subject)
    try:
        hits = subject.count(old) if old else len(subject) + 1
    except TypeError:
        return len(subject)  # str and bytes mixed: replace() raises
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(subject) + hits * max(len(new) - len(old), 0)


def _join(subject: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    items = args[0] if args else ()
    if not isinstance(items, list | tuple):
        return len(subject)
    parts = sum(len(i) for i in items if isinstance(i, str | bytes))
    return parts + len(subject) * max(len(items) - 1, 0)


def _expandtabs(subject: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    size = _width(args, kwargs, "tabsize") if (args or kwargs) else 8
    tabs: int = subject.count("\t" if isinstance(subject, str) else b"\t")
    return len(subject) + tabs * size


def _translate(subject: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    table = args[0] if args else None
    if isinstance(table, Mapping):
        longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
        return len(subject) * max(longest, 1)
    return len(subject)


def _padded(subject: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    return max(len(subject), _width(args, kwargs))


def _to_bytes(subject: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    return _width(args, kwargs, "length") if (args or "length" in kwargs) else 1


StrEstimate = Callable[[Any, Sequence[Any], Mapping[str, Any]], int]

# The methods of str and bytes (and int.to_bytes) whose result can be far bigger than
# their inputs; every other method builds at most a few times its subject.
METHODS: dict[str, StrEstimate] = {
    "center": _padded,
    "ljust": _padded,
    "rjust": _padded,
    "zfill": _padded,
    "expandtabs": _expandtabs,
    "replace": replace_size,
    "join": _join,
    "translate": _translate,
}
INT_METHODS: dict[str, StrEstimate] = {"to_bytes": _to_bytes}
