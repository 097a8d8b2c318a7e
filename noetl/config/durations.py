"""Durations as people write them in settings and flags: `30d`, `12h`, `90m`, `45s`
(a bare number is days: `retention.older_than: 30`, `NOETL_RETENTION_DAYS=30`)."""

from __future__ import annotations

import re

__all__ = ["parse_duration"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str | int | float) -> float:
    """Seconds in `text` (`30d`, `12h`, `90m`, `45s`, `2w`; a bare number: days);
    ValueError for anything else, or for zero."""
    match = _DURATION.match(str(text).lower())
    if match is None:
        raise ValueError(
            f"{str(text)[:40]!r} is not a duration: write a number and a unit, "
            "s, m, h, d or w (30d, 12h, 90m); a bare number is days"
        )
    seconds = float(match[1]) * _UNITS[match[2] or "d"]
    if seconds <= 0:
        raise ValueError("a duration must be more than zero")
    return seconds
