"""The Store contract of retention (`Store.prune`): every adapter deletes the same history,
keeps the same tombstone, never touches a running execution, and keeps fencing tokens
growing across a prune."""

from __future__ import annotations

import pytest

from noetl.core import Event, ExecutionStatus, HistoryPrunedError
from noetl.store.base import Append, Enqueue, InputKind, Store
from noetl.store.records import PRUNED_TABLES
from tests.contract.test_dlq_contract import entry, note
from tests.contract.test_queue_contract import LONG_S, claim_one, last_seq, make_task, start
from tests.helpers.clock import StoreClock

# Executions finish at FINISHED (the commit's `now`); a prune before CUTOFF takes them.
FINISHED = 1000.0
CUTOFF = 2000.0
NEVER = 0.0  # a dead-letter cutoff no entry is older than
ALWAYS = 4_000_000_000.0  # one every entry is older than


def finish(store: Store, execution_id: str, status: ExecutionStatus = ExecutionStatus.OK) -> None:
    seq = last_seq(store, execution_id)
    event = Event(seq + 1, "workflow.finished", execution_id, 3.0, payload={})
    store.commit([Append(execution_id, seq, [event], status=status, now=FINISHED)])


def finished_with_history(store: Store, execution_id: str) -> None:
    """An execution with a task claimed and done, a step state, an input, a result, a
    checkpoint, then finished at FINISHED."""
    start(store, Enqueue(make_task("a", execution_id=execution_id)), execution_id=execution_id)
    lease = claim_one(store, executions=[execution_id], lease_s=LONG_S)
    assert store.complete(lease.task.task_id, lease.token, {"status": "ok", "result": 1})
    seq = last_seq(store, execution_id)
    event = Event(seq + 1, "step.done", execution_id, 2.0, "a", {})
    store.commit([Append(execution_id, seq, [event], steps={"a": {"status": "ok"}}, now=2.0)])
    store.results.put(execution_id, "a", {"rows": [1, 2]})
    store.checkpoints.save(f"{execution_id}.a", execution_id, 1, {"offset": 3})
    finish(store, execution_id)


def test_prune_deletes_a_finished_history_and_keeps_a_tombstone(store: Store) -> None:
    finished_with_history(store, "old")

    report = store.prune(CUTOFF, dead_letters_before=NEVER, batch=10)

    assert report.executions == 1 and not report.dry_run and not report.skipped
    assert set(report.rows) == set(PRUNED_TABLES)
    assert report.rows["event_log"] == 3
    assert report.rows["task_queue"] == 1
    assert report.rows["inbox"] == 1  # the outcome, never decided here
    assert report.rows["execution_input"] == 1
    assert report.rows["step_state"] == 1
    assert report.rows["result_store"] == 1
    assert report.rows["task_checkpoint"] == 1
    assert report.rows["dlq"] == 0
    record = store.get_execution("old")
    assert record is not None
    assert record.status == ExecutionStatus.OK and record.pruned_at is not None
    assert record.finished_at == FINISHED and record.context == {}
    assert record.playbook_name == "demo"
    assert store.get_task("old.a") is None
    assert store.results.count("old") == (0, 0)
    assert store.checkpoints.load("old.a") is None
    with pytest.raises(HistoryPrunedError, match="history was pruned on"):
        store.load_events("old")
    assert store.load_execution("old") is None
    with pytest.raises(HistoryPrunedError, match="old"):
        store.get_steps("old")
    # A second prune finds nothing left to do.
    again = store.prune(CUTOFF, dead_letters_before=NEVER)
    assert again.executions == 0 and again.total == 0


def test_dry_run_counts_the_same_and_deletes_nothing(store: Store) -> None:
    finished_with_history(store, "old")
    before = store.load_events("old")

    dry = store.prune(CUTOFF, dead_letters_before=NEVER, dry_run=True)

    assert dry.dry_run and dry.executions == 1 and dry.total > 0
    assert store.load_events("old") == before
    record = store.get_execution("old")
    assert record is not None and record.pruned_at is None
    real = store.prune(CUTOFF, dead_letters_before=NEVER)
    assert real.rows == dry.rows and real.executions == dry.executions


def test_running_and_recent_executions_are_never_touched(store: Store) -> None:
    start(store, Enqueue(make_task("a", execution_id="live")), execution_id="live")
    store.post_input("live", InputKind.CANCEL, {"by": "test"})
    finished_with_history(store, "recent")
    seq = last_seq(store, "recent")
    late = Event(seq + 1, "workflow.finished", "recent", 3.0, payload={})
    store.commit([Append("recent", seq, [late], status=ExecutionStatus.FAIL, now=CUTOFF + 1)])

    report = store.prune(CUTOFF, dead_letters_before=ALWAYS)

    assert report.executions == 0 and report.total == 0
    assert len(store.load_events("live")) == 1
    assert store.get_task("live.a") is not None
    assert len(store.load_events("recent")) == 4
    assert claim_one(store, executions=["live"]).task.step == "a"


def test_prune_works_in_batches(store: Store) -> None:
    for n in range(5):
        start(store, execution_id=f"e{n}")
        finish(store, f"e{n}", ExecutionStatus.CANCELED)

    report = store.prune(CUTOFF, dead_letters_before=NEVER, batch=2)

    assert report.executions == 5 and report.batches == 3
    assert report.rows["event_log"] == 10
    assert all(r.pruned_at is not None for r in store.list_executions())


def test_a_pending_dead_letter_keeps_its_execution_until_an_operator_settles_it(
    store: Store, clock: StoreClock
) -> None:
    start(store, execution_id="e1")
    note(store, entry("e1.a"), entry("e1.b"), entry("e1.c"))
    assert store.discard_dead_letter("e1.a", "bad input")
    assert store.post_replay("e1.b", {"by": "test"})
    finish(store, "e1", ExecutionStatus.FAIL)
    finished_with_history(store, "e2")

    # e1.c waits for an operator, and its replay needs e1's history: e1 stays whole.
    dry = store.prune(CUTOFF, dead_letters_before=ALWAYS, dry_run=True)
    assert dry.executions == 1 and dry.rows["dlq"] == 0
    held = store.prune(CUTOFF, dead_letters_before=ALWAYS)
    assert held.executions == 1 and held.rows["dlq"] == 0
    assert store.get_execution("e1").pruned_at is None  # type: ignore[union-attr]
    assert store.get_execution("e2").pruned_at is not None  # type: ignore[union-attr]
    assert store.load_events("e1")
    assert store.dead_letter_counts() == {"pending": 1, "replayed": 1, "discarded": 1}

    # Settled, e1 goes; its settled dead letters go once past their own retention.
    assert store.discard_dead_letter("e1.c", "not worth a replay")
    kept = store.prune(CUTOFF, dead_letters_before=NEVER)
    assert kept.executions == 1 and kept.rows["dlq"] == 0
    assert store.dead_letter_counts() == {"pending": 0, "replayed": 1, "discarded": 2}
    dry = store.prune(CUTOFF, dead_letters_before=clock() + 60, dry_run=True)
    assert dry.rows["dlq"] == 3 and dry.executions == 0
    gone = store.prune(CUTOFF, dead_letters_before=clock() + 60)
    assert gone.rows["dlq"] == 3
    assert store.dead_letter_counts() == {"pending": 0, "replayed": 0, "discarded": 0}


def test_a_dead_letter_of_a_pruned_execution_says_its_history_is_gone(store: Store) -> None:
    """A dead letter noted after its execution was pruned (or left pending by an older
    release's prune) cannot be replayed, and says why; it can still be discarded."""
    finished_with_history(store, "e1")
    assert store.prune(CUTOFF, dead_letters_before=NEVER).executions == 1
    note(store, entry("e1.z"))
    with pytest.raises(HistoryPrunedError, match="e1"):
        store.post_replay("e1.z", {"by": "test"})
    assert store.discard_dead_letter("e1.z", "history pruned")


def test_fencing_tokens_keep_growing_across_a_prune(store: Store) -> None:
    start(store, Enqueue(make_task("a", execution_id="f")), execution_id="f")
    first = claim_one(store, executions=["f"], lease_s=LONG_S)
    assert store.release([(first.task.task_id, first.token)]) == {"f.a"}
    stale = claim_one(store, executions=["f"], lease_s=LONG_S)
    assert stale.token == 2
    finish(store, "f", ExecutionStatus.CANCELED)
    assert store.prune(CUTOFF, dead_letters_before=NEVER).executions == 1
    assert store.get_task("f.a") is None
    # The holder of the lease taken before the prune has lost it.
    assert not store.heartbeat("f.a", stale.token).alive
    assert not store.complete("f.a", stale.token, {"status": "ok"})

    # The same task queued again (what reopening the execution would do) starts above
    # every token handed out before the prune: the old holder stays fenced off.
    seq = last_seq(store, "f")
    reopened = Event(seq + 1, "task.requeued", "f", 4.0, "a", {})
    again = Append("f", seq, [reopened], enqueue=[Enqueue(make_task("a", execution_id="f"))])
    store.commit([again])
    lease = claim_one(store, executions=["f"], lease_s=LONG_S)
    assert lease.token > stale.token
    assert not store.complete("f.a", stale.token, {"status": "ok"})
    assert not store.heartbeat("f.a", stale.token).alive
    assert store.complete("f.a", lease.token, {"status": "ok"})


def test_a_new_execution_starts_its_tokens_at_one(store: Store) -> None:
    finished_with_history(store, "old")
    store.prune(CUTOFF, dead_letters_before=NEVER)
    start(store, Enqueue(make_task("a", execution_id="new")), execution_id="new")
    assert claim_one(store, executions=["new"]).token == 1
