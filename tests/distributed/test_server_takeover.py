"""A server that dies while it holds inputs, for real: server processes on PostgreSQL.

An orchestrator holds a batch of inbox inputs while it decides them (the hold is 30 s).
To catch a server holding some, the test locks the execution's row (FOR NO KEY UPDATE, as
a commit does): the server claims a batch, decides, and waits in its commit. Then:

* it is killed (SIGKILL), its connections dropped (its commit, sent whole, waits in the
  database until then): a new server takes its inputs over at once (its session ended,
  so its lock is free), not once the 30 s hold expires;
* it is alive but slow: nobody takes its inputs;
* it loses its session while it lives (the connection ends): another server takes its
  inputs over, the first one commits too, and nothing is decided twice.
"""

from __future__ import annotations

import collections
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noetl.store import open_store
from noetl.store.base import Store
from tests.distributed.cluster import Cluster, Proc, free_port, wait_until
from tests.distributed.test_faults import RECORD, runs

pytestmark = [pytest.mark.services, pytest.mark.slow]

ITEMS = 40


def loop_playbook(sleep: float) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: takeover}}
workflow:
  - step: items
    loop: {{collection: "{{{{ range({ITEMS}) | list }}}}", element: n, mode: parallel,
            max_concurrency: 4}}
    tool:
      kind: python
      code: {json.dumps(RECORD)}
      args: {{out: "{{{{ workload.out }}}}", step: "i{{{{ n }}}}", sleep: {sleep}}}
    result: {{collect: {{into: done, mode: list}}}}
"""


@pytest.fixture
def store(pg_database: str) -> Iterator[Store]:
    st = open_store(pg_database)
    try:
        yield st
    finally:
        st.close()


def held_by(db: str, proc: Proc) -> list[int]:
    """Ids of the inputs `proc`'s orchestrator holds now (a hold not yet expired): its
    owner name is `host:pid`."""
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id FROM inbox WHERE claimed_until > now() "
            "AND (claimed_by LIKE %s OR claimed_by LIKE %s) ORDER BY id",
            (f"%:{proc.pid}", f"%:{proc.pid}#%"),
        ).fetchall()
    return [row[0] for row in rows]


class RowLock:
    """The execution's row locked as a commit locks it, so a server's commit waits."""

    def __init__(self, db: str, execution_id: str) -> None:
        self.conn = psycopg.connect(db)
        self.conn.execute(
            "SELECT 1 FROM execution WHERE execution_id = %s FOR NO KEY UPDATE", (execution_id,)
        )

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()


def hold_some(cluster: Cluster, server: Proc, execution_id: str, out: Path) -> RowLock:
    """Let the loop run a while, then make `server` hold inputs (it waits in its commit)."""
    wait_until(lambda: sum(runs(out).values()) >= 4, 60, "4 items to run")
    lock = RowLock(cluster.db, execution_id)
    try:
        wait_until(lambda: bool(held_by(cluster.db, server)), 30, "the server to hold inputs")
        # Holding them is not yet waiting: its commit may still be on its way (a loaded
        # machine decides slowly).
        wait_until(lambda: bool(waiting(cluster.db)), 30, "the server's commit to wait")
    except BaseException:
        lock.release()
        raise
    return lock


def waiting(db: str) -> list[int]:
    """The sessions of the database waiting on a lock."""
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchall()
    return [row[0] for row in rows]


def drop_waiting(db: str) -> None:
    """End the sessions waiting on a lock in the database (a killed server's commit)."""
    with psycopg.connect(db, autocommit=True) as conn:
        ended = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchall()
    assert ended, "no session waited on the lock"


def check_once(cluster: Cluster, execution_id: str, out: Path) -> None:
    """The execution ended ok, and nothing was dispatched, run or decided twice."""
    result = cluster.wait_finished(execution_id, timeout=60)
    assert result["status"] == "ok", result
    assert len(result["context"]["done"]) == ITEMS
    events = cluster.events(execution_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    kinds = collections.Counter(e["type"] for e in events)
    assert kinds["step.started"] == 1 and kinds["workflow.finished"] == 1
    assert kinds["task.reclaimed"] == 0
    finished = collections.Counter(
        e["payload"]["index"] for e in events if e["type"] == "loop.iteration.finished"
    )
    assert finished == dict.fromkeys(range(ITEMS), 1)
    processed: collections.Counter[Any] = collections.Counter(
        e["payload"]["task_id"] for e in events if e["type"] == "tool.processed"
    )
    assert len(processed) == ITEMS and set(processed.values()) == {1}
    assert runs(out) == {f"i{n}": 1 for n in range(ITEMS)}


def test_a_killed_servers_inputs_are_taken_over_at_once(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    server = cluster.start_server(name="server1")
    cluster.start_worker("w1", lease_s=10.0, concurrency=2)
    cluster.start_worker("w2", lease_s=10.0, concurrency=2)
    execution_id = cluster.start_execution(loop_playbook(0.1), {"out": str(out)})
    lock = hold_some(cluster, server, execution_id, out)
    try:
        held = held_by(cluster.db, server)
        server.kill9()
        # Its commit went out whole (one round trip) and waits on the lock in the
        # database, which notices a client is gone only when it next talks to it: the
        # commit would land once the lock frees, and nothing would be left to take over.
        # A dead machine's connections are dropped (TCP keepalive); so are these.
        drop_waiting(cluster.db)
    finally:
        lock.release()  # also when the test fails: an open lock would outlive it

    restarted = time.monotonic()
    cluster.start_server(port=cluster.port, name="server2")
    serving = time.monotonic()
    cluster.wait_finished(execution_id, timeout=60)
    finished = time.monotonic()
    # The dead server's hold (the orchestrator's default, 30 s) had most of its time left:
    # waiting it out, the execution finished about 30 s after the restart.
    assert finished - restarted < 15, f"finished {finished - restarted:.1f} s after the restart"
    assert finished - serving < 8, f"finished {finished - serving:.1f} s after server2 was up"
    assert held and not set(held) & set(held_by(cluster.db, server))
    check_once(cluster, execution_id, out)
    assert "inputs held by orchestrators that are gone" in cluster.procs[-1].output()


def test_a_slow_but_live_servers_inputs_are_not_taken(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    server = cluster.start_server(name="server1")
    cluster.start_worker("w1", lease_s=10.0, concurrency=2)
    cluster.start_worker("w2", lease_s=10.0, concurrency=2)
    execution_id = cluster.start_execution(loop_playbook(0.1), {"out": str(out)})
    lock = hold_some(cluster, server, execution_id, out)
    held = held_by(cluster.db, server)
    server.signal(signal.SIGSTOP)  # alive, its session open, but not running at all
    try:
        # Its commit waits on the lock meanwhile (it went out whole, and would land on its
        # own once the lock frees: the lock stays until the check is done).
        other = cluster.start_server(port=free_port(), name="server2")
        time.sleep(3.0)  # several reaps of the other server
        assert set(held) <= set(held_by(cluster.db, server))
        assert "held by orchestrators that are gone" not in other.output()
    finally:
        lock.release()
        server.signal(signal.SIGCONT)
    check_once(cluster, execution_id, out)


def test_a_server_that_lost_its_session_decides_nothing_twice(
    cluster: Cluster, store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    server = cluster.start_server(name="server1")
    cluster.start_worker("w1", lease_s=10.0, concurrency=2)
    cluster.start_worker("w2", lease_s=10.0, concurrency=2)
    execution_id = cluster.start_execution(loop_playbook(0.1), {"out": str(out)})
    lock = hold_some(cluster, server, execution_id, out)
    try:
        held = held_by(cluster.db, server)
        # The server's holder session ends (as a lost connection would end it); its
        # decision, waiting in its commit on another connection, is still on its way.
        with psycopg.connect(cluster.db, autocommit=True) as conn:
            ended = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'noetl holder'"
            ).fetchall()
        assert len(ended) == 1
        other = cluster.start_server(port=free_port(), name="server2")
        # The other server takes the inputs over and decides them too (its commit waits
        # on the same lock).
        wait_until(lambda: set(held) <= set(held_by(cluster.db, other)), 30, "the takeover")
    finally:
        lock.release()
    check_once(cluster, execution_id, out)
    wait_until(lambda: "holding anew" in server.output(), 30, "the server to hold anew")
