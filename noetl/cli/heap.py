"""The heap of a NoETL process (`noetl server start`, `noetl worker start`, `noetl run`).

What such a process imports and builds before it serves (the web framework, the models,
the app, the pools) lives as long as it does, yet every full collection walked it again:
about 70 ms a time on the test machine, five times in 3,000 starts. `settle` freezes it
once (`gc.freeze`), so the collector walks only what the process made since, and lets
more allocations pass between two young collections (`YOUNG_THRESHOLD` instead of
Python's 700): a request or a task allocates thousands of short-lived objects, which no
longer live through a collection only to be promoted and walked again later. Over 3,000
starts (`bench/starts.py` with `bench/gcprobe`) the server's collections took 0.13 to
0.16 s instead of 0.56 to 0.59 s, with no full one after start-up. Objects frozen are
never collected, so this runs once, after start-up.
"""

from __future__ import annotations

import gc

# Allocations (less deallocations) between two collections of the youngest generation.
YOUNG_THRESHOLD = 7000


def settle() -> None:
    """Collect what start-up left, keep every object alive now out of the collector's
    walks for good, and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
