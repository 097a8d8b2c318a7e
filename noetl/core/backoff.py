"""The wait between two attempts, shared by the engine's task retries
(`noetl.engine.retry.backoff_delay`) and the sinks' write retries
(`noetl.sinks.retry_delays`).

Pure arithmetic: no clock, no randomness. Jitter is a number the caller draws (the engine
from a sha256 of the execution, step and attempt, the sinks from a generator seeded by the
write's key), so the same attempt always waits the same time.
"""

from __future__ import annotations

import math

__all__ = ["backoff_seconds"]


def backoff_seconds(
    attempt: int,
    *,
    initial: float,
    multiplier: float = 2.0,
    max_delay: float = math.inf,
    backoff: str = "exponential",
    jitter: float | None = None,
) -> float:
    """Seconds to wait after failed attempt `attempt` (1, 2, ...) before the next one.

    exponential: `initial * multiplier ** (attempt - 1)`; linear: `initial * attempt`;
    fixed: `initial`; capped at `max_delay` (an initial delay of 0 or less waits 0).
    `jitter`, a number in [0, 1) or None for none, scales the capped delay by
    `0.5 + jitter / 2`: a delay never passes the cap, and retries still spread out."""
    n = max(attempt, 1)
    if initial <= 0:
        base = 0.0
    elif backoff == "fixed":
        base = initial
    elif backoff == "linear":
        base = initial * n
    else:
        try:
            base = initial * multiplier ** (n - 1)
        except OverflowError:
            base = math.inf
    delay = min(base, max_delay)
    if jitter is not None:
        delay *= 0.5 + jitter / 2
    return delay
