"""The tick arithmetic of schedules (noetl.core.ticks): cron in a time zone across both
daylight saving changes, fixed intervals, start/end, and the catch-up policies."""

from __future__ import annotations

import itertools
from datetime import datetime

import pytest

from noetl.core.ticks import (
    Catchup,
    TickSpec,
    due_ticks,
    next_ticks,
    parse_duration,
    ticks_after,
    zone,
)

BERLIN = zone("Europe/Berlin")


def at(text: str) -> float:
    """Epoch seconds of an ISO time with its offset."""
    return datetime.fromisoformat(text).timestamp()


def local(ticks: list[float]) -> list[str]:
    return [datetime.fromtimestamp(t, BERLIN).isoformat() for t in ticks]


def berlin(cron: str) -> TickSpec:
    return TickSpec(cron=cron, timezone="Europe/Berlin")


# --- spring forward: 2026-03-29, 02:00 CET jumps to 03:00 CEST --------------------------


def test_spring_forward_a_daily_time_in_the_gap_fires_once_after_it() -> None:
    ticks = ticks_after(
        berlin("30 2 * * *"), at("2026-03-28T00:00+01:00"), until=at("2026-03-31T00:00+02:00")
    )
    assert local(ticks) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",  # 02:30 does not exist that day
        "2026-03-30T02:30:00+02:00",
    ]


def test_spring_forward_hourly_skips_the_missing_hour() -> None:
    ticks = ticks_after(
        berlin("0 * * * *"), at("2026-03-29T00:30+01:00"), until=at("2026-03-29T04:30+02:00")
    )
    assert local(ticks) == [
        "2026-03-29T01:00:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T04:00:00+02:00",
    ]
    # one real hour between each: nothing fired twice, nothing lost
    assert [b - a for a, b in itertools.pairwise(ticks)] == [3600, 3600]


def test_spring_forward_two_local_times_on_one_instant_are_one_tick() -> None:
    ticks = ticks_after(
        berlin("30 2,3 * * *"), at("2026-03-29T00:00+01:00"), until=at("2026-03-29T05:00+02:00")
    )
    assert local(ticks) == ["2026-03-29T03:00:00+02:00", "2026-03-29T03:30:00+02:00"]


# --- fall back: 2026-10-25, 03:00 CEST goes back to 02:00 CET ---------------------------


def test_fall_back_a_fixed_time_fires_on_the_first_pass_only() -> None:
    ticks = ticks_after(
        berlin("30 2 * * *"), at("2026-10-24T00:00+02:00"), until=at("2026-10-26T12:00+01:00")
    )
    assert local(ticks) == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",  # the second 02:30 (+01:00) does not fire
        "2026-10-26T02:30:00+01:00",
    ]


def test_fall_back_hourly_fires_every_real_hour() -> None:
    ticks = ticks_after(
        berlin("0 * * * *"), at("2026-10-25T00:30+02:00"), until=at("2026-10-25T03:30+01:00")
    )
    assert local(ticks) == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",  # the repeated hour: a wildcard hour fires again
        "2026-10-25T03:00:00+01:00",
    ]


def test_utc_has_no_shift() -> None:
    spec = TickSpec(cron="0 0 * * *")
    assert next_ticks(spec, at("2026-10-24T12:00+00:00"), 2) == [
        at("2026-10-25T00:00+00:00"),
        at("2026-10-26T00:00+00:00"),
    ]


# --- every, start and end ---------------------------------------------------------------


def test_every_is_aligned_to_the_epoch_or_the_start() -> None:
    assert ticks_after(TickSpec(every=30), 95.0, until=185.0) == [120.0, 150.0, 180.0]
    spec = TickSpec(every=30, start=100.0, end=170.0)
    assert ticks_after(spec, 0.0, until=1000.0) == [100.0, 130.0, 160.0]


def test_every_in_milliseconds_is_exact() -> None:
    assert ticks_after(TickSpec(every=0.5), 1.2, until=2.6) == [1.5, 2.0, 2.5]


def test_durations() -> None:
    assert parse_duration("30s") == 30
    assert parse_duration("1h30m") == 5400
    assert parse_duration("500ms") == 0.5
    assert parse_duration(2) == 2
    for bad in ("", "3 weeks", "0s", "-1", "1x"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_a_spec_is_checked() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        TickSpec(cron="* * * * *", every=1)
    with pytest.raises(ValueError, match="cron"):
        TickSpec(cron="61 * * * *")
    with pytest.raises(ValueError, match="time zone"):
        TickSpec(every=1, timezone="Mars/Olympus")


# --- catch-up ----------------------------------------------------------------------------


def spec_every(catchup: Catchup, window: float = 3600) -> TickSpec:
    return TickSpec(every=10, catchup=catchup, catchup_window=window)


def test_on_time_ticks_fire_whatever_the_policy() -> None:
    for policy in Catchup:
        due = due_ticks(spec_every(policy), cursor=1000, now=1012, grace=5)
        assert due.fire == (1010,)
        assert due.dropped == 0


def test_catchup_none_drops_missed_ticks() -> None:
    due = due_ticks(spec_every(Catchup.NONE), cursor=1000, now=1055, grace=3)
    assert due.fire == ()
    assert due.dropped == 5
    due = due_ticks(spec_every(Catchup.NONE), cursor=1000, now=1061, grace=3)
    assert due.fire == (1060,)


def test_catchup_latest_fires_the_newest_missed_tick() -> None:
    due = due_ticks(spec_every(Catchup.LATEST), cursor=1000, now=1055, grace=3)
    assert due.fire == (1050,)
    assert due.dropped == 4


def test_catchup_all_fires_every_missed_tick_within_the_window() -> None:
    due = due_ticks(spec_every(Catchup.ALL, window=30), cursor=1000, now=1055, grace=3)
    assert due.fire == (1030, 1040, 1050)
    assert due.dropped == 2  # 1010 and 1020 are outside the window
    assert due_ticks(spec_every(Catchup.ALL), cursor=1000, now=1055, grace=3).fire == (
        1010,
        1020,
        1030,
        1040,
        1050,
    )
