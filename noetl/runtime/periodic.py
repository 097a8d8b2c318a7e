"""A server's periodic background pass (retention, partitions): run it now and every
interval until stopped, surviving a failed pass."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


def every(
    interval_s: float, stop: threading.Event, run_once: Callable[[], object], *, what: str
) -> None:
    """Call `run_once` now and every `interval_s` until `stop` is set. A failed pass (a
    database blip) is logged on `noetl.<what>`'s logger as "`what` pass failed" and tried
    again at the next interval: it never takes the server down."""
    log = logging.getLogger(f"noetl.{what}")
    while not stop.is_set():
        try:
            run_once()
        except Exception:  # keep the server up: the next pass tries again
            log.exception("%s pass failed; trying again in %g s", what, interval_s)
        stop.wait(interval_s)
