"""`noetl.cli.heap.settle`: what a long-lived process does to its heap after start-up."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from noetl.cli.heap import YOUNG_THRESHOLD, settle


@pytest.fixture
def restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.usefixtures("restored")
def test_settle_freezes_what_is_alive_and_collects_the_young_less_often() -> None:
    gc.unfreeze()
    kept = [object() for _ in range(10)]  # alive at start-up: frozen with the rest
    garbage = _Cycle()  # start-up garbage: collected first, not frozen for good
    gone = weakref.ref(garbage)
    del garbage
    before = gc.get_threshold()
    settle()
    assert gc.get_freeze_count() > len(kept)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, before[1], before[2])
    assert gc.get_count()[0] < YOUNG_THRESHOLD
    assert gone() is None


class _Cycle:
    def __init__(self) -> None:
        self.me = self
