"""Every adapter keeps NUL characters: in keys and values of every JSON column it writes
(events, the workload in workflow.started, context, step states, task payloads, inbox
payloads, timers, dead letters) and in a dead letter's free text. PostgreSQL holds them only escaped
(`noetl.store._pg_nul`); the escape character itself must come back unchanged too, and so
must a backslash that merely looks like an escape."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from noetl.core import Event
from noetl.store.base import (
    Append,
    DeadLetter,
    Enqueue,
    ExecutionRecord,
    InputKind,
    Store,
    Timer,
)
from tests.contract.test_dlq_contract import entry
from tests.contract.test_queue_contract import make_task
from tests.helpers.clock import StoreClock

MARK = "\ufdd0"
# Strings an escape could confuse: NUL, the escape character, the two together, the text
# of the escapes (with a real backslash), and a plain value.
AWKWARD = ["a\x00b", "\x00", MARK, MARK + "0", "\x00" + MARK, MARK + MARK + "0", "\\u0000", "ü"]


def nul_value(tag: str = "") -> dict[str, Any]:
    """A JSON value with AWKWARD strings as keys, values and list items, nested."""
    return {
        f"k\x00{tag}": {"inner\x00": AWKWARD, MARK: "\x00\x00", "\\u0000": MARK + "0"},
        "list": [{"x\x00": s} for s in AWKWARD],
        "plain": 1,
    }


def test_nul_characters_round_trip_through_every_json_column(
    store: Store, clock: StoreClock
) -> None:
    task = make_task("a", args={"s\x00": nul_value("args")}, context={"c": nul_value("ctx")})
    record = ExecutionRecord(
        execution_id="e1",
        playbook_name="demo",
        playbook_path=None,
        playbook_text="name: demo\n",
        created_at=100.0,
        updated_at=100.0,
        context=nul_value("context0"),
    )
    first = Event(1, "workflow.started", "e1", 1.0, payload={"workload": nul_value("workload")})
    store.create_execution(record, Append("e1", 0, [first], enqueue=[Enqueue(task)], now=1.0))
    stored = store.get_execution("e1")
    assert stored is not None
    assert stored.context == record.context
    # The workload is stored once, in workflow.started.
    assert store.load_events("e1")[0].payload == {"workload": nul_value("workload")}

    second = Event(2, "step.finished", "e1", 2.0, "a", nul_value("event2"))
    store.commit(
        [
            Append(
                "e1",
                1,
                [second],
                steps={"a": {"status": "ok", "result": nul_value("step")}},
                context=nul_value("context"),
                timers=[Timer(0.0, nul_value("timer"))],
                now=2.0,
            )
        ]
    )
    assert store.load_events("e1") == [first, second]
    assert store.get_steps("e1") == {"a": {"status": "ok", "result": nul_value("step")}}
    stored = store.get_execution("e1")
    assert stored is not None and stored.context == nul_value("context")
    row = store.get_task("e1.a")
    assert row is not None and row["payload"]["args"] == task.args

    (lease,) = store.claim("w1", limit=5, lease_s=60.0)
    assert lease.task == task
    outcome = {"task_id": "e1.a", "ok": True, "this": nul_value("outcome")}
    assert store.complete_many([("e1.a", lease.token, outcome)]) == {"e1.a"}
    store.post_input("e1", InputKind.CANCEL, {"by": "op\x00" + MARK})
    clock.advance(0.05)  # the timer is due at once
    inputs = store.claim_inputs("server", limit=10)
    payloads = {i.kind: i.payload for i in inputs}
    assert payloads == {
        InputKind.TIMER: nul_value("timer"),
        InputKind.OUTCOME: outcome,
        InputKind.CANCEL: {"by": "op\x00" + MARK},
    }


def test_nul_characters_round_trip_through_a_continuation(store: Store) -> None:
    first = make_task("a")
    store.create_execution(
        ExecutionRecord("e1", "demo", None, "x", created_at=1.0, updated_at=1.0),
        Append("e1", 0, [Event(1, "workflow.started", "e1", 1.0)], enqueue=[Enqueue(first)]),
    )
    (lease,) = store.claim("w1", lease_s=60.0)
    follow = make_task("b", args=nul_value("follow"))
    event = Event(2, "step.finished", "e1", 2.0, "a", nul_value("continued"))
    leases = store.complete_and_commit(
        "e1.a",
        lease.token,
        Append("e1", 1, [event], enqueue=[Enqueue(follow)], context=nul_value("ctx"), now=2.0),
        worker_id="w1",
        lease=["e1.b"],
        lease_s=60.0,
    )
    assert leases is not None and [held.task for held in leases] == [follow]
    assert store.load_events("e1", after_seq=1) == [event]
    store.complete("e1.b", leases[0].token, {"task_id": "e1.b", "this": nul_value("done")})
    (posted,) = store.claim_inputs("server")
    assert posted.payload == {"task_id": "e1.b", "this": nul_value("done")}


def test_nul_characters_round_trip_through_dead_letters(store: Store) -> None:
    store.create_execution(
        ExecutionRecord("e1", "demo", None, "x", created_at=1.0, updated_at=1.0),
        Append("e1", 0, [Event(1, "workflow.started", "e1", 1.0)]),
    )
    written: DeadLetter = entry(
        loop_index=1,
        loop_key={"id\x00": MARK + "0"},
        reason="exhausted",
        error_type="ValueError",
        last_error="bad value 'a\x00b' " + MARK,
        last_stack="line 1\x00\n" + MARK + MARK,
        payload={"args": nul_value("payload")},
        context_excerpt='{"s":"\x00"}',
        task={"task_id": "e1.load", "args": nul_value("task")},
    )
    event = Event(2, "task.dead_lettered", "e1", 2.0, "load", {"error": written.last_error})
    store.commit([Append("e1", 1, [event], dead_letters=[written], now=2.0)])
    assert store.get_dead_letter("e1.load") == written
    assert store.list_dead_letters() == [written]
    assert store.discard_dead_letter("e1.load", "poison \x00 " + MARK)
    assert store.get_dead_letter("e1.load") == replace(
        written, status="discarded", discard_reason="poison \x00 " + MARK
    )
    assert store.load_events("e1", after_seq=1) == [event]
