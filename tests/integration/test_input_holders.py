"""Input holders of other processes, and orchestrators racing on one input, for real.

A holder in a real subprocess that is killed (SIGKILL) is found gone: on PostgreSQL by
its session's advisory lock, on SQLite by its process. A holder whose PostgreSQL session
ends while its process lives (a lost connection) is found gone too, and its orchestrator
holds anew. And two orchestrators that both decide one input (the second took it over)
record it once: the commit refuses a decision on an input consumed elsewhere.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from noetl.core import EventType, ExecutionStatus
from noetl.runtime.orchestrator import Orchestrator
from noetl.store import PostgresStore, SqliteStore, open_store
from noetl.store._holders import HolderId, LocalHolders, new_holder, parse, process_gone
from noetl.store.base import InputKind, Store, StoreUnavailableError
from tests.conftest import ROOT

LONG_S = 60.0

ONE_STEP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: one}
workflow:
  - step: only
    tool: {kind: noop, args: {n: 1}}
"""

HOLD = """\
import sys, time
from noetl.store import open_store
store = open_store(sys.argv[1])
holder = store.open_holder("other-process")
held = store.claim_inputs(holder.token, lease_s=60.0)
print(holder.token, len(held), flush=True)
time.sleep(600)
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "noetl.db")
    return str(request.getfixturevalue("pg_database"))


@pytest.fixture
def store(db: str) -> Iterator[Store]:
    opened = open_store(db)
    yield opened
    opened.close()


def holding_process(db: str) -> tuple[subprocess.Popen[str], str, int]:
    """A real process holding every free input; its token and how many it holds."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, db], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    assert proc.stdout is not None
    token, held = proc.stdout.readline().split()
    return proc, token, int(held)


def released(store: Store, expected: int, timeout: float = 10.0) -> int:
    """Reap as an orchestrator does (every 0.5 s, here faster) until `expected` inputs
    were freed or the timeout passes; how many were freed."""
    freed = 0
    deadline = time.monotonic() + timeout
    while freed < expected and time.monotonic() < deadline:
        freed += store.release_orphaned_inputs()
        time.sleep(0.05)
    return freed


def test_inputs_of_a_killed_process_are_freed_and_a_live_ones_kept(store: Store, db: str) -> None:
    orchestrator = Orchestrator(store, owner="here")
    execution_id = orchestrator.start_execution(ONE_STEP)
    ids = [store.post_input(execution_id, InputKind.CANCEL, {"n": n}) for n in range(3)]
    proc, token, held = holding_process(db)
    try:
        assert held == 3
        assert parse(token) is not None and parse(token).pid == proc.pid  # type: ignore[union-attr]
        mine = store.open_holder("here")
        assert store.release_orphaned_inputs() == 0  # the process lives: its hold stands
        assert store.claim_inputs(mine.token) == []
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()

    # The killed process's session ends a moment after it (PostgreSQL): reap until then.
    assert released(store, 3) == 3
    assert [i.id for i in store.claim_inputs(mine.token, lease_s=LONG_S)] == ids


def test_a_pid_used_again_or_gone_means_the_holder_is_gone() -> None:
    local = LocalHolders()
    mine = new_holder("me")
    assert process_gone(mine, local)  # this process's, and not open (closed)
    local.add(mine.token)
    assert not process_gone(mine, local)
    # This process's pid with another start time: a process that had our pid before us.
    before = HolderId("me", mine.host, mine.pid, "1", mine.nonce)
    assert mine.start == "" or process_gone(before, local)
    # A process that ended (and was reaped).
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait(timeout=30)
    assert process_gone(HolderId("x", mine.host, ended.pid, "", mine.nonce), local)
    # A holder of another host: nothing here can tell.
    assert not process_gone(HolderId("x", "elsewhere", ended.pid, "", mine.nonce), local)
    assert parse(mine.token) == mine
    assert parse("host:1") is None and parse("timer") is None


# -- PostgreSQL: a session that ends while the process lives --------------------------------


def terminate_holders(dsn: str) -> int:
    """End every input holder's session of the database (as a lost connection would)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'noetl holder'"
        ).fetchall()
    return len(rows)


def test_a_holder_whose_session_ended_is_gone_and_claims_no_more(pg_database: str) -> None:
    store = PostgresStore(pg_database)
    try:
        orchestrator = Orchestrator(store, owner="here")
        execution_id = orchestrator.start_execution(ONE_STEP)
        store.post_input(execution_id, InputKind.CANCEL, {"by": "test"})
        holder = store.open_holder("lost")
        assert len(store.claim_inputs(holder.token, lease_s=LONG_S)) == 1
        assert terminate_holders(pg_database) == 1

        assert released(store, 1) == 1
        with pytest.raises(StoreUnavailableError):
            store.claim_inputs(holder.token)
        assert not holder.alive()
        # The orchestrator holds anew, with a new token, and decides the freed input.
        assert orchestrator.run_once() == 1
        assert orchestrator.holder_token not in (None, holder.token)
        record = store.get_execution(execution_id)
        assert record is not None and record.status is ExecutionStatus.CANCELED
    finally:
        store.close()


def test_an_orchestrator_holds_anew_after_losing_its_session(pg_database: str) -> None:
    store = PostgresStore(pg_database)
    try:
        orchestrator = Orchestrator(store, owner="here")
        execution_id = orchestrator.start_execution(ONE_STEP)
        assert orchestrator.run_once() == 0
        first = orchestrator.holder_token
        assert terminate_holders(pg_database) == 1
        store.post_input(execution_id, InputKind.CANCEL, {"by": "test"})

        assert orchestrator.run_once() == 1  # no error: the claim fails, it holds anew
        assert orchestrator.holder_token not in (None, first)
    finally:
        store.close()


# -- two orchestrators deciding one input ---------------------------------------------------


def test_an_input_decided_by_two_orchestrators_is_recorded_once(store: Store) -> None:
    """The first orchestrator holds an expired lease's input and is slow to commit; the
    second takes the input over (its hold ran out) and commits first. The first one's
    commit then fails, and it must not decide the input again on the new state: a second
    `task.reclaimed` would run the task once more."""
    slow = Orchestrator(store, owner="slow", input_lease_s=0.0)
    fast = Orchestrator(store, owner="fast")
    execution_id = slow.start_execution(ONE_STEP)
    (lease,) = store.claim("w", lease_s=0.01)
    time.sleep(0.05)
    assert store.reap_expired() == 1
    commit = store.commit
    overtaken = []

    def overtaken_first(appends):  # type: ignore[no-untyped-def]
        if not overtaken:
            overtaken.append(True)
            assert fast.run_once() == 1  # decides and commits the same input
        commit(appends)

    store.commit = overtaken_first  # type: ignore[method-assign]
    try:
        slow.run_once()
    finally:
        store.commit = commit  # type: ignore[method-assign]

    assert overtaken == [True]
    events = store.load_events(execution_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    reclaimed = [e.payload for e in events if e.type == EventType.TASK_RECLAIMED]
    assert reclaimed == [{"task_id": lease.task.task_id, "attempt": 2, "worker_id": "w"}]
    row = store.get_task(lease.task.task_id)
    assert row is not None and row["attempt"] == 2
    assert store.claim_inputs("o1") == []
    # The task runs once more and the execution ends.
    (again,) = store.claim("w2")
    assert again.task.attempt == 2
    assert store.complete(
        again.task.task_id, again.token, {"task_id": again.task.task_id, "ok": True}
    )
    assert fast.run_once() == 1
    record = store.get_execution(execution_id)
    assert record is not None and record.status is ExecutionStatus.OK
    started = collections.Counter(
        e.step for e in store.load_events(execution_id) if e.type == "step.started"
    )
    assert started == {"only": 1}


def test_sqlite_holders_survive_a_second_store_on_the_file(tmp_path: Path) -> None:
    """Two stores of one process on one file: a holder open in either is alive for both."""
    first = SqliteStore(tmp_path / "db.sqlite")
    second = SqliteStore(tmp_path / "db.sqlite")
    try:
        execution_id = Orchestrator(first, owner="a").start_execution(ONE_STEP)
        first.post_input(execution_id, InputKind.CANCEL, {"by": "test"})
        holder = first.open_holder("a")
        assert len(first.claim_inputs(holder.token, lease_s=LONG_S)) == 1
        assert second.release_orphaned_inputs() == 0
        holder.close()
        assert second.release_orphaned_inputs() == 1
    finally:
        first.close()
        second.close()
