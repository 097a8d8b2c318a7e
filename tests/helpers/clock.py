"""Clocks for store tests: a fake one that moves only when told, and the real one.

A store judges leases, holds and delays by its clock (`MemoryStore(clock=...)`,
`SqliteStore(clock=...)`). A test lets a lease run out with `clock.advance(seconds)`: the
fake clock jumps at once; the real clock (PostgreSQL, which keeps the database's `now()`)
sleeps that long.
"""

from __future__ import annotations

import time

# A fixed start far from zero, so a time computed from it looks like an epoch time.
FAKE_START = 1_700_000_000.0


class FakeClock:
    """Epoch seconds that move only by `advance`, and by one `tick` at each reading: two
    operations are never at the same time (as on a real clock, which the queue's order of
    equal priorities relies on), yet a lease of 10 ms outlives ten thousand readings."""

    real = False

    def __init__(self, start: float = FAKE_START, tick: float = 1e-6) -> None:
        self.now = start
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RealClock:
    """`time.time`; `advance` sleeps (for a store that reads its own clock)."""

    real = True

    def __call__(self) -> float:
        return time.time()

    def advance(self, seconds: float) -> None:
        time.sleep(seconds)


StoreClock = FakeClock | RealClock
