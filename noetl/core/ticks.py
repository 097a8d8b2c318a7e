"""Tick arithmetic of schedules: when a schedule fires, and which missed ticks to fire.

Pure: no clock, no I/O; every time is an epoch-seconds float the caller gives (`now`,
the cursor). A schedule fires on a cron expression in a time zone (croniter) or every
fixed interval (aligned to its `start`, else to the epoch, so every process computes the
same ticks without asking anyone).

Daylight saving time (cron in a zone that has it):

* Spring forward (a local hour is skipped): a local time inside the gap fires ONCE, at
  the first instant after the gap (`30 2 * * *` in Europe/Berlin fires at 03:00 CEST on
  that day). A tick that would fall on the same instant as another is one tick
  (`30 2 * * *` and the 03:00 tick of `0,30 2-3 * * *` are one).
* Fall back (a local hour repeats): an expression with a fixed hour field (`30 2 * * *`,
  `0 */2 * * *`) fires once, at the FIRST pass of the repeated wall time; an expression
  whose hour field is `*` (`0 * * * *`, `*/15 * * * *`) fires on both passes, as it fires
  every hour of real time (classic cron's rule for fixed-time and wildcard jobs).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "Catchup",
    "Due",
    "Overlap",
    "TickSpec",
    "due_ticks",
    "next_ticks",
    "parse_duration",
    "ticks_after",
    "valid_cron",
    "zone",
]

# How many ticks one call computes at most (a 1 s schedule with a year of catch-up
# window would otherwise compute 31 million): the rest wait for the next call.
MAX_TICKS = 1000

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class Overlap(StrEnum):
    """What a tick does while the schedule's previous execution still runs (Temporal's
    overlap policies)."""

    SKIP = "skip"  # the tick is skipped
    BUFFER_ONE = "buffer_one"  # the tick starts when the running one ends; one kept at most
    ALLOW = "allow"  # the tick starts at once, beside it
    CANCEL_OTHER = "cancel_other"  # the running one is asked to cancel; the tick starts


class Catchup(StrEnum):
    """Which missed ticks (more than the grace late: nobody was up at tick time) fire."""

    NONE = "none"
    LATEST = "latest"  # only the newest missed tick within the window
    ALL = "all"  # every missed tick within the window, oldest first


def parse_duration(value: str | float | int) -> float:
    """Seconds of `30s`, `5m`, `1h30m`, `500ms`, `2d`, or a plain number of seconds;
    ValueError for anything else (or a duration that is not positive)."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string such as '30s'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().replace(" ", "")
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(
                    f"{value!r} is not a duration (write 30s, 5m, 1h30m, 500ms, 2d)"
                ) from None
            seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"a duration must be positive, not {value!r}")
    return seconds


def zone(name: str) -> tzinfo:
    """The time zone `name` (IANA, e.g. Europe/Berlin); ValueError when unknown."""
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


def valid_cron(expression: str) -> bool:
    """Whether croniter reads `expression` (5 fields, or 6 with seconds last)."""
    from croniter import croniter  # noqa: PLC0415 - loaded only for a cron trigger

    return bool(croniter.is_valid(expression)) and len(expression.split()) in (5, 6)


@dataclass(frozen=True, slots=True)
class TickSpec:
    """When a schedule fires: `cron` (in `timezone`) or `every` seconds, between `start`
    and `end` (epoch seconds, both optional and inclusive)."""

    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"
    start: float | None = None
    end: float | None = None
    catchup: Catchup = Catchup.LATEST
    catchup_window: float = 3600.0

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise ValueError("a schedule has exactly one of cron and every")
        if self.cron is not None and not valid_cron(self.cron):
            raise ValueError(f"{self.cron!r} is not a cron expression")
        if self.every is not None and self.every <= 0:
            raise ValueError("every must be positive")
        zone(self.timezone)


def ticks_after(
    spec: TickSpec, after: float, *, until: float, limit: int = MAX_TICKS
) -> list[float]:
    """The ticks t with after < t <= until (and within start/end), oldest first, at most
    `limit` of them."""
    lower = after if spec.start is None else max(after, spec.start - 1e-6)
    upper = until if spec.end is None else min(until, spec.end)
    found: list[float] = []
    for tick in _iterate(spec, lower):
        if tick > upper or len(found) >= limit:
            break
        found.append(tick)
    return found


def _iterate(spec: TickSpec, after: float) -> Iterator[float]:
    if spec.every is not None:
        yield from _every(spec.every, 0.0 if spec.start is None else spec.start, after)
    else:
        assert spec.cron is not None
        yield from _cron(spec.cron, zone(spec.timezone), after)


def _every(interval: float, anchor: float, after: float) -> Iterator[float]:
    # Whole milliseconds, so every process (and a database key) sees the same tick.
    step = round(interval * 1000)
    base = round(anchor * 1000)
    k = max(0, (round(after * 1000) - base) // step)
    while True:
        tick_ms = base + k * step
        if tick_ms > after * 1000:
            yield tick_ms / 1000
        k += 1


def _cron(expression: str, tz: tzinfo, after: float) -> Iterator[float]:
    fixed_hour = expression.split()[1] != "*"
    start = datetime.fromtimestamp(after, tz)
    from croniter import croniter  # noqa: PLC0415 - loaded only for a cron trigger

    iterator = croniter(expression, start)
    last = after
    while True:
        moment: datetime = iterator.get_next(datetime)
        tick = moment.timestamp()
        if tick <= last:  # two local times on one instant (spring forward): one tick
            continue
        if fixed_hour and _second_pass(moment, tz):
            continue
        last = tick
        yield tick


def _second_pass(moment: datetime, tz: tzinfo) -> bool:
    """Whether `moment` is the second pass of a local time that repeats (fall back)."""
    wall = moment.replace(tzinfo=None)
    first = wall.replace(tzinfo=tz, fold=0).timestamp()
    second = wall.replace(tzinfo=tz, fold=1).timestamp()
    return first != second and moment.timestamp() == second


@dataclass(frozen=True, slots=True)
class Due:
    """What one look at a schedule found: the ticks to fire now, oldest first, and how
    many missed ticks the catch-up policy dropped."""

    fire: tuple[float, ...]
    dropped: int


def due_ticks(spec: TickSpec, cursor: float, now: float, *, grace: float) -> Due:
    """The ticks after `cursor` (the newest tick already decided, or the schedule's
    creation) up to `now` to fire: those at most `grace` late always; those later by the
    catch-up policy (none; the newest within `catchup_window`; all within it)."""
    lower = cursor
    if spec.catchup is Catchup.NONE:
        lower = max(cursor, now - grace)
    else:
        lower = max(cursor, now - max(grace, spec.catchup_window))
    candidates = ticks_after(spec, lower, until=now)
    on_time = [t for t in candidates if now - t <= grace]
    late = [t for t in candidates if now - t > grace]
    dropped = _missed_before(spec, cursor, lower)
    if spec.catchup is Catchup.LATEST and late:
        if on_time:  # a tick on time supersedes every missed one
            return Due(tuple(on_time), dropped + len(late))
        return Due((late[-1], *on_time), dropped + len(late) - 1)
    if spec.catchup is Catchup.NONE:
        return Due(tuple(on_time), dropped)
    return Due(tuple(late + on_time), dropped)


def _missed_before(spec: TickSpec, cursor: float, lower: float) -> int:
    """How many ticks lie between the cursor and the start of what is looked at (outside
    the catch-up window), counted up to MAX_TICKS."""
    if lower <= cursor:
        return 0
    return len(ticks_after(spec, cursor, until=lower))


def next_ticks(spec: TickSpec, after: float, count: int) -> list[float]:
    """The next `count` ticks after `after` (fewer when the schedule ends first)."""
    return ticks_after(spec, after, until=float("inf"), limit=count)
