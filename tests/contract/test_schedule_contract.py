"""Schedules and their ticks (`store.schedules`) of every Store adapter: a tick is claimed
once, by one caller, however many claim it at once; a tick moves on from the status its
mover saw, once."""

from __future__ import annotations

import threading

from noetl.store.base import ScheduleRecord, Store, TickRecord, TickStatus
from tests.helpers.clock import StoreClock

SPEC = {"name": "often", "every": "2s", "overlap": "skip"}


def tick(ms: int, owner: str = "a", status: TickStatus = TickStatus.PENDING) -> TickRecord:
    return TickRecord("pb:often", ms, status, f"ex-{ms}-{owner}", owner)


def test_a_schedule_is_kept_and_updated_keeping_creation_and_pause(
    store: Store, clock: StoreClock
) -> None:
    made = store.schedules.put(ScheduleRecord("pb:often", "pb", SPEC, "playbook"))
    assert (made.name, made.playbook_path, made.spec, made.source, made.paused) == (
        "pb:often",
        "pb",
        SPEC,
        "playbook",
        False,
    )
    assert store.schedules.set_paused("pb:often", True) is True
    clock.advance(0.01)
    again = store.schedules.put(ScheduleRecord("pb:often", "pb2", {**SPEC, "every": "5s"}))
    assert again.paused is True  # a playbook registered again does not resume it
    assert again.created_at == made.created_at
    assert again.spec["every"] == "5s"
    assert again.playbook_path == "pb2"
    assert [s.name for s in store.schedules.all()] == ["pb:often"]
    assert store.schedules.set_paused("nope", True) is False
    assert store.schedules.get("nope") is None


def test_a_tick_is_claimed_once(store: Store) -> None:
    store.schedules.put(ScheduleRecord("pb:often", "pb", SPEC))
    assert store.schedules.claim_tick(tick(2000, "a")) is True
    assert store.schedules.claim_tick(tick(2000, "b")) is False
    kept = store.schedules.ticks("pb:often")
    assert [(t.tick_ms, t.owner, t.execution_id) for t in kept] == [(2000, "a", "ex-2000-a")]
    assert store.schedules.claim_tick(tick(4000, "b")) is True
    last = store.schedules.last_tick("pb:often")
    assert last is not None
    assert (last.tick_ms, last.tick, last.status) == (4000, 4.0, TickStatus.PENDING)
    assert store.schedules.last_tick("pb:often", manual=True) is None


def test_concurrent_claims_of_one_tick_let_one_win(store: Store) -> None:
    store.schedules.put(ScheduleRecord("pb:often", "pb", SPEC))
    wins: list[str] = []
    barrier = threading.Barrier(8)

    def claim(owner: str) -> None:
        barrier.wait()
        for ms in range(0, 20_000, 2000):
            if store.schedules.claim_tick(tick(ms, owner)):
                wins.append(f"{ms}:{owner}")

    threads = [threading.Thread(target=claim, args=(f"o{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(int(w.split(":")[0]) for w in wins) == list(range(0, 20_000, 2000))
    assert len(store.schedules.ticks("pb:often", limit=100)) == 10


def test_a_tick_moves_on_once_from_the_status_seen(store: Store) -> None:
    store.schedules.claim_tick(tick(2000, status=TickStatus.BUFFERED))
    move = store.schedules.move_tick
    assert move("pb:often", 2000, TickStatus.PENDING, expect=TickStatus.BUFFERED) is True
    assert move("pb:often", 2000, TickStatus.PENDING, expect=TickStatus.BUFFERED) is False
    assert [t.tick_ms for t in store.schedules.ticks_with(TickStatus.PENDING)] == [2000]
    assert move("pb:often", 2000, TickStatus.FAILED, expect=TickStatus.PENDING, error="gone")
    got = store.schedules.ticks("pb:often")[0]
    assert (got.status, got.error) == (TickStatus.FAILED, "gone")
    assert store.schedules.ticks_with(TickStatus.PENDING) == []


def test_manual_ticks_are_apart_and_delete_forgets_ticks(store: Store) -> None:
    store.schedules.put(ScheduleRecord("pb:often", "pb", SPEC))
    store.schedules.claim_tick(tick(2000))
    manual = TickRecord("pb:often", 9000, TickStatus.STARTED, "ex-m", "cli", manual=True)
    assert store.schedules.claim_tick(manual) is True
    last = store.schedules.last_tick("pb:often")
    assert last is not None and last.tick_ms == 2000
    got = store.schedules.last_tick("pb:often", manual=True)
    assert got is not None and got.manual and got.execution_id == "ex-m"
    assert store.schedules.delete("pb:often") is True
    assert store.schedules.delete("pb:often") is False
    assert store.schedules.ticks("pb:often") == []
    # the same ticks can be claimed again by a schedule made anew
    assert store.schedules.claim_tick(tick(2000)) is True


def test_a_webhook_token_is_kept_across_puts(store: Store) -> None:
    store.schedules.put(ScheduleRecord("hook", "pb", {"name": "hook", "webhook": True}))
    assert store.schedules.set_token("hook", "abc123", sealed="k1:gAAA") is True
    again = store.schedules.put(ScheduleRecord("hook", "pb", {"name": "hook", "webhook": True}))
    assert (again.token_hash, again.token_sealed) == ("abc123", "k1:gAAA")
    assert store.schedules.set_token("hook", None) is True
    got = store.schedules.get("hook")
    assert got is not None and got.token_hash is None and got.token_sealed is None
    assert store.schedules.set_token("nope", "x") is False


def test_a_delivery_key_is_claimed_once(store: Store) -> None:
    store.schedules.put(ScheduleRecord("hook", "pb", {"name": "hook", "webhook": True}))
    assert store.schedules.claim_delivery("hook", "k-1", "ex-1") == ("ex-1", True)
    assert store.schedules.claim_delivery("hook", "k-1", "ex-2") == ("ex-1", False)
    assert store.schedules.claim_delivery("hook", "k-2", "ex-3") == ("ex-3", True)
    assert store.schedules.claim_delivery("other", "k-1", "ex-4") == ("ex-4", True)
    store.schedules.delete("hook")
    assert store.schedules.claim_delivery("hook", "k-1", "ex-5") == ("ex-5", True)
