"""The four compensation patterns end to end: the real CLI in a subprocess, a real SQLite
file for the runtime, real DuckDB files for the effects.

A: examples/compensation_explicit_undo.yaml   C: examples/compensation_idempotent_upsert.yaml
B: a saga written here (and examples/saga.yaml) D: examples/compensation_outbox.yaml

Every run works in a fresh directory (`cwd=tmp_path`), as on a fresh laptop: the examples
keep their DuckDB files under `.noetl/examples/` of the working directory.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import duckdb

from tests.conftest import EXAMPLES
from tests.helpers.cli import noetl

EXPLICIT_UNDO = EXAMPLES / "compensation_explicit_undo.yaml"
IDEMPOTENT_UPSERT = EXAMPLES / "compensation_idempotent_upsert.yaml"
OUTBOX = EXAMPLES / "compensation_outbox.yaml"


def run(path: Path, cwd: Path, *sets: str) -> tuple[int, dict[str, Any]]:
    """`noetl run <path> --json` in `cwd`, with `--set` for each of `sets`."""
    args = [a for s in sets for a in ("--set", s)]
    proc = noetl("run", path, "--json", "--db", "runtime.db", *args, cwd=cwd, no_traceback=True)
    return proc.returncode, json.loads(proc.stdout)


def events(cwd: Path, execution_id: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    """The execution's event log, in order: (type, step, payload)."""
    with sqlite3.connect(cwd / "runtime.db") as conn:
        rows = conn.execute(
            "SELECT type, step, payload FROM event_log WHERE execution_id = ? ORDER BY seq",
            (execution_id,),
        ).fetchall()
    return [(kind, step, json.loads(payload)) for kind, step, payload in rows]


def started(log: list[tuple[str, str | None, dict[str, Any]]]) -> list[str | None]:
    return [step for kind, step, _ in log if kind == "step.started"]


def statuses(out: dict[str, Any]) -> dict[str, str]:
    return {name: step["status"] for name, step in out["steps"].items()}


def query(database: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(database), read_only=True) as conn:
        return conn.execute(sql).fetchall()


# --- A: explicit undo steps routed on failure ------------------------------------------------


def test_explicit_undo_reverses_both_bookings_when_the_charge_fails(tmp_path: Path) -> None:
    code, out = run(EXPLICIT_UNDO, tmp_path)
    assert code == 0
    assert out["status"] == "ok"  # every failure was routed by an edge: handled
    assert out["steps"]["charge"]["status"] == "failed"
    assert "card declined" in out["steps"]["charge"]["error"]
    assert statuses(out)["confirm"] == "skipped"
    log = events(tmp_path, out["execution_id"])
    assert started(log) == [
        "start",
        "book_flight",
        "book_hotel",
        "charge",
        "cancel_hotel",
        "cancel_flight",
        "report",
    ]
    # The effects were real: each booking step wrote its row before the failure.
    written = {
        step: [s["rows"] for s in payload["sinks"]]
        for kind, step, payload in log
        if kind == "tool.processed" and payload.get("sinks")
    }
    assert written == {"book_flight": [1], "book_hotel": [1]}
    # ...and the undo steps deleted them, newest first.
    deleted = {
        step: payload["result"]["rowcount"]
        for kind, step, payload in log
        if kind == "step.finished" and step in {"cancel_hotel", "cancel_flight"}
    }
    assert deleted == {"cancel_hotel": 1, "cancel_flight": 1}
    assert out["context"]["bookings"] == []
    database = tmp_path / ".noetl" / "examples" / "explicit_undo.duckdb"
    assert query(database, "SELECT count(*) FROM bookings") == [(0,)]


def test_explicit_undo_enters_the_chain_where_the_failure_happened(tmp_path: Path) -> None:
    code, out = run(EXPLICIT_UNDO, tmp_path, "fail_at=hotel")
    assert code == 0
    assert out["status"] == "ok"
    assert "no room left" in out["steps"]["book_hotel"]["error"]
    assert started(events(tmp_path, out["execution_id"])) == [
        "start",
        "book_flight",
        "book_hotel",
        "cancel_flight",
        "report",
    ]
    assert statuses(out)["charge"] == "skipped"
    assert statuses(out)["cancel_hotel"] == "skipped"
    assert out["context"]["bookings"] == []


def test_explicit_undo_runs_no_undo_step_on_success(tmp_path: Path) -> None:
    code, out = run(EXPLICIT_UNDO, tmp_path, "fail_at=none")
    assert code == 0
    assert statuses(out) == {
        "start": "ok",
        "book_flight": "ok",
        "book_hotel": "ok",
        "charge": "ok",
        "confirm": "ok",
        "cancel_hotel": "skipped",
        "cancel_flight": "skipped",
        "report": "ok",
    }
    assert out["context"]["bookings"] == [
        {"kind": "flight", "status": "confirmed"},
        {"kind": "hotel", "status": "confirmed"},
    ]


# --- B: the saga (policy.rollback: on_fail + compensate) -------------------------------------

SAGA = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: saga_three_steps}
policy: {rollback: on_fail}
workflow:
  - step: reserve
    compensate: release
    tool: {kind: python, code: "def main(context, args):\\n    return 'reserved'\\n"}
    result: {as: reservation}
    next: charge
  - step: charge
    compensate: refund
    tool: {kind: python, code: "def main(context, args):\\n    return 'charged'\\n"}
    result: {as: payment}
    next: ship
  - step: ship
    retry: false
    tool:
      kind: python
      code: "def main(context, args):\\n    raise RuntimeError('no courier')\\n"
  - step: refund
    tool: {kind: noop, args: {undid: "{{ payment }}"}}
    result: {as: refunded}
  - step: release
    tool: {kind: noop, args: {undid: "{{ reservation }}"}}
    result: {as: released}
"""


def test_saga_compensates_in_reverse_completion_order(tmp_path: Path) -> None:
    playbook = tmp_path / "saga.yaml"
    playbook.write_text(SAGA, encoding="utf-8")
    code, out = run(playbook, tmp_path)
    assert code == 1
    assert out["status"] == "fail"  # a rollback undoes the effects, not the failure
    assert "no courier" in out["steps"]["ship"]["error"]
    assert out["context"]["refunded"] == {"undid": "charged"}
    assert out["context"]["released"] == {"undid": "reserved"}
    log = events(tmp_path, out["execution_id"])
    completed = [s for k, s, p in log if k == "step.finished" and p["status"] == "ok"]
    assert completed[:2] == ["reserve", "charge"]
    rollbacks = [p for k, _, p in log if k == "compensation.started"]
    assert rollbacks == [{"failed_step": "ship", "queue": ["refund", "release"]}]
    assert started(log) == ["reserve", "charge", "ship", "refund", "release"]
    # The rollback starts after the failure, and runs one compensating step at a time.
    order = [(k, s) for k, s, _ in log]
    assert (
        order.index(("step.finished", "ship"))
        < order.index(("compensation.started", None))
        < order.index(("step.started", "refund"))
        < order.index(("step.finished", "refund"))
        < order.index(("step.started", "release"))
    )
    called = [p for k, s, p in log if k == "step.called" and s in {"refund", "release"}]
    assert called == [{"by": "rollback", "compensating": True}] * 2
    assert order[-1] == ("workflow.finished", None)


# `first` is called before `second` but parked until `second` is done, so the two finish
# in the other order: the rollback follows completion, not declaration or call order.
SAGA_OUT_OF_ORDER = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: saga_out_of_order}
policy: {rollback: on_fail}
workflow:
  - step: start
    next: [first, second]
  - step: first
    when: "{{ done('second') }}"
    compensate: undo_first
    tool: {kind: noop, args: {did: first}}
    next: third
  - step: second
    compensate: undo_second
    tool: {kind: noop, args: {did: second}}
    next: third
  - step: third
    when: "{{ done('first') and done('second') }}"
    retry: false
    tool: {kind: python, code: "def main(context, args):\\n    raise RuntimeError('boom')\\n"}
  - step: undo_first
    tool: noop
  - step: undo_second
    tool: noop
"""


def test_saga_order_is_completion_order_not_declaration_order(tmp_path: Path) -> None:
    playbook = tmp_path / "saga.yaml"
    playbook.write_text(SAGA_OUT_OF_ORDER, encoding="utf-8")
    code, out = run(playbook, tmp_path)
    assert code == 1
    assert out["status"] == "fail"
    log = events(tmp_path, out["execution_id"])
    finished = [s for k, s, p in log if k == "step.finished" and p["status"] == "ok"]
    assert finished[:3] == ["start", "second", "first"]
    rollbacks = [p for k, _, p in log if k == "compensation.started"]
    assert rollbacks == [{"failed_step": "third", "queue": ["undo_first", "undo_second"]}]
    assert started(log)[-2:] == ["undo_first", "undo_second"]
    assert statuses(out)["undo_first"] == statuses(out)["undo_second"] == "ok"


def test_saga_example_logs_its_rollback(tmp_path: Path) -> None:
    code, out = run(EXAMPLES / "saga.yaml", tmp_path)
    assert code == 1
    log = events(tmp_path, out["execution_id"])
    rollbacks = [p for k, _, p in log if k == "compensation.started"]
    assert rollbacks == [{"failed_step": "ship", "queue": ["refund", "release"]}]
    assert started(log) == ["reserve", "charge", "ship", "refund", "release"]


# --- C: idempotent upserts -------------------------------------------------------------------


def test_idempotent_upsert_rerun_after_a_failure_writes_nothing_twice(tmp_path: Path) -> None:
    database = tmp_path / ".noetl" / "examples" / "idempotent_upsert.duckdb"
    code, out = run(IDEMPOTENT_UPSERT, tmp_path, "fail_totals=true")
    assert code == 1
    assert statuses(out) == {
        "start": "ok",
        "load_orders": "ok",
        "load_totals": "failed",
        "report": "skipped",
    }
    assert query(database, "SELECT order_id FROM orders ORDER BY order_id") == [
        ("o-1",),
        ("o-2",),
        ("o-3",),
    ]
    for _ in range(2):  # the rerun, and one more for good measure
        code, out = run(IDEMPOTENT_UPSERT, tmp_path)
        assert code == 0
        assert out["context"]["counts"] == {"orders": 3, "customer_totals": 2}
    assert query(database, "SELECT order_id, customer, amount FROM orders ORDER BY 1") == [
        ("o-1", "ada", 120),
        ("o-2", "ada", 30),
        ("o-3", "grace", 75),
    ]
    assert query(database, "SELECT customer, total FROM customer_totals ORDER BY 1") == [
        ("ada", 150),
        ("grace", 75),
    ]


def test_idempotent_upsert_rerun_with_a_change_updates_in_place(tmp_path: Path) -> None:
    database = tmp_path / ".noetl" / "examples" / "idempotent_upsert.duckdb"
    assert run(IDEMPOTENT_UPSERT, tmp_path)[0] == 0
    orders = (
        "orders=[{order_id: o-1, customer: ada, amount: 120},"
        " {order_id: o-2, customer: ada, amount: 50},"
        " {order_id: o-3, customer: grace, amount: 75}]"
    )
    code, out = run(IDEMPOTENT_UPSERT, tmp_path, orders)
    assert code == 0
    assert out["context"]["counts"] == {"orders": 3, "customer_totals": 2}
    assert query(database, "SELECT amount FROM orders WHERE order_id = 'o-2'") == [(50,)]
    assert query(database, "SELECT total FROM customer_totals WHERE customer = 'ada'") == [(170,)]


# --- D: the outbox ---------------------------------------------------------------------------


def published_ids(out: dict[str, Any]) -> list[str]:
    return [m["event_id"] for m in out["context"]["published"]]


def test_outbox_publishes_only_what_was_not_sent(tmp_path: Path) -> None:
    database = tmp_path / ".noetl" / "examples" / "outbox.duckdb"
    three = "orders=[o-1, o-2, o-3]"

    code, first = run(OUTBOX, tmp_path)
    assert code == 0
    assert published_ids(first) == ["order_placed:o-1", "order_placed:o-2"]
    assert first["context"]["outbox"] == {"sent": 2, "unsent": 0}

    code, again = run(OUTBOX, tmp_path)
    assert code == 0
    assert again["context"]["published"] == []
    assert again["context"]["outbox"] == {"sent": 2, "unsent": 0}

    # The broker is down: the new intent is recorded, not published, not marked sent.
    code, down = run(OUTBOX, tmp_path, three, "broker_down=true")
    assert code == 1
    assert "broker unreachable" in down["steps"]["publish"]["error"]
    assert statuses(down)["mark_sent"] == "skipped"
    assert query(database, "SELECT event_id, sent FROM outbox ORDER BY 1") == [
        ("order_placed:o-1", True),
        ("order_placed:o-2", True),
        ("order_placed:o-3", False),
    ]

    # The next run publishes only the intent the failed run left unsent.
    code, recovered = run(OUTBOX, tmp_path, three)
    assert code == 0
    assert published_ids(recovered) == ["order_placed:o-3"]
    assert recovered["context"]["outbox"] == {"sent": 3, "unsent": 0}

    assert query(database, "SELECT event_id, published_by FROM broker ORDER BY 1") == [
        ("order_placed:o-1", first["execution_id"]),
        ("order_placed:o-2", first["execution_id"]),
        ("order_placed:o-3", recovered["execution_id"]),
    ]
