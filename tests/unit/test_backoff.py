"""The one backoff arithmetic (`noetl.core.backoff`) shared by the engine's task retries and
the sinks' write retries: the numbers of each curve, the cap, jitter, and that both users
compute through it the delays they computed before."""

from __future__ import annotations

import hashlib
import math
import random

import pytest

from noetl.core.backoff import backoff_seconds
from noetl.engine.retry import RetryRule, backoff_delay, jitter_factor
from noetl.sinks import retry_delays


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [
        ("exponential", [0.5, 1.0, 2.0, 4.0, 5.0]),
        ("linear", [0.5, 1.0, 1.5, 2.0, 2.5]),
        ("fixed", [0.5, 0.5, 0.5, 0.5, 0.5]),
    ],
)
def test_each_curve_capped(backoff: str, expected: list[float]) -> None:
    delays = [
        backoff_seconds(n, initial=0.5, multiplier=2.0, max_delay=5.0, backoff=backoff)
        for n in range(1, 6)
    ]
    assert delays == expected


def test_jitter_scales_the_capped_delay_into_its_upper_half() -> None:
    assert backoff_seconds(3, initial=1.0, max_delay=3.0, jitter=0.0) == 1.5
    assert backoff_seconds(3, initial=1.0, max_delay=3.0, jitter=0.5) == 2.25
    assert backoff_seconds(1, initial=1.0, jitter=0.999) < 1.0


def test_no_initial_delay_waits_nothing_and_a_huge_attempt_hits_the_cap() -> None:
    assert backoff_seconds(4, initial=0.0) == 0.0
    assert backoff_seconds(4, initial=-1.0, backoff="linear") == 0.0
    assert backoff_seconds(10_000, initial=1.0, multiplier=10.0, max_delay=30.0) == 30.0
    assert backoff_seconds(10_000, initial=1.0, multiplier=10.0) == math.inf
    assert backoff_seconds(0, initial=0.2) == 0.2  # attempt 0 reads as the first


def test_the_engine_computes_its_delays_through_it() -> None:
    rule = RetryRule(
        max_attempts=6,
        initial_delay=0.2,
        backoff_multiplier=3.0,
        max_delay=4.0,
        jitter=True,
        backoff="exponential",
    )
    for attempt in range(1, 6):
        key = f"e1:fetch:{attempt}"
        digest = hashlib.sha256(key.encode()).digest()
        factor = int.from_bytes(digest[:8], "big") / 2.0**64
        assert jitter_factor(key) == factor
        plain = min(0.2 * 3.0 ** (attempt - 1), 4.0)
        assert backoff_delay(rule, attempt, key) == plain * (0.5 + factor / 2)


def test_the_sinks_compute_their_delays_through_it() -> None:
    assert retry_delays(None, "k") == [0.2, 0.4]  # the default: 3 attempts, x2
    policy = {"max_attempts": 4, "initial_delay": 1, "max_delay": 2.5, "jitter": True}
    seeded = [random.Random(f"k:{n}").random() for n in (1, 2, 3)]
    assert retry_delays(policy, "k") == [
        min(1.0 * 2.0 ** (n - 1), 2.5) * (0.5 + seeded[n - 1] / 2) for n in (1, 2, 3)
    ]
    assert retry_delays({"initial_delay": 0, "jitter": False}, "k") == [0.0, 0.0]
