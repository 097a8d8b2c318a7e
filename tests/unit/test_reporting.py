"""The worker's reporter (`noetl.worker.reporting`) over the memory store: one report the
store refuses fails its own task and holds up none of the others sent with it."""

from __future__ import annotations

from typing import Any

from noetl.core import Event, Outcome
from noetl.store import MemoryStore
from noetl.store.base import Append, Enqueue, ExecutionRecord, InputKind
from noetl.worker.reporting import REPORT_ERROR, Report, Reporter
from tests.contract.test_queue_contract import make_task


def leased(store: MemoryStore, *steps: str) -> list[Any]:
    tasks = [make_task(step) for step in steps]
    store.create_execution(
        ExecutionRecord("e1", "demo", None, "x", created_at=1.0, updated_at=1.0),
        Append(
            "e1", 0, [Event(1, "workflow.started", "e1", 1.0)], enqueue=[Enqueue(t) for t in tasks]
        ),
    )
    return store.claim("w1", limit=len(steps), lease_s=60.0)


def test_a_refused_report_fails_its_task_and_the_rest_of_the_batch_is_sent() -> None:
    store = MemoryStore()
    errors: list[str] = []
    reporter = Reporter(store, give_up_s=1.0, errors=errors)
    first, bad, last = leased(store, "a", "b", "c")
    batch = [
        Report(first, Outcome("e1.a", ok=True, this=1)),
        Report(bad, Outcome("e1.b", ok=True, this={"not json": {1, 2}}, duration_ms=5.0)),
        Report(last, Outcome("e1.c", ok=True, this=3)),
    ]
    reporter.send(batch)

    assert [r.accepted for r in batch] == [True, True, True]
    assert all(r.sent.is_set() for r in batch)
    refused = batch[1].outcome
    assert (refused.ok, refused.error_type, refused.retryable) == (False, REPORT_ERROR, False)
    assert refused.error == (
        "the worker could not report the task's result: "
        "TypeError: Object of type set is not JSON serializable"
    )
    posted = {i.payload["task_id"]: i.payload for i in store.claim_inputs("server")}
    assert {i.kind for i in store.claim_inputs("other")} <= {InputKind.OUTCOME}
    assert posted["e1.a"]["this"] == 1 and posted["e1.c"]["this"] == 3
    assert posted["e1.b"]["ok"] is False and posted["e1.b"]["error_type"] == REPORT_ERROR
    assert errors == []


def test_reports_made_after_a_stop_are_sent_by_their_own_thread() -> None:
    store = MemoryStore()
    reporter = Reporter(store, give_up_s=1.0, errors=[])
    reporter.start()
    (held,) = leased(store, "a")
    reporter.stop(timeout=5)
    report = Report(held, Outcome("e1.a", ok=True, this="late"))
    reporter.report(report)
    assert report.accepted is True
    (posted,) = store.claim_inputs("server")
    assert posted.payload["this"] == "late"
