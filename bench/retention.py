"""Retention on PostgreSQL: batch deletes (`Store.prune`, what NoETL does) against dropping
a time partition of the event log (what it does not do), on the same rows.

    python bench/retention.py [--dsn postgresql://postgres@127.0.0.1:5432/test]
                              [--executions 2000] [--events 250] [--batch 1000]

Makes a scratch database, fills it with `--executions` finished executions of `--events`
events each (half finished 60 days ago, half yesterday), each with a queue row, step
states and an input, then:

- prune: `PostgresStore.prune` of the old half, `--batch` executions per transaction,
  timed, with the worst time a claim waited meanwhile (a claimer polls the queue on
  another connection during the prune: do the deletes hold up the live queue?);
- partition: the same events in an event log partitioned by month of `ts`; time to detach
  and drop the old partition;
- reads: one execution's events from the plain log and from the partitioned one (a read
  by execution id cannot prune partitions: it probes each one's index).

Prints one JSON object. The scratch database is dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import psycopg

from noetl.store import PostgresStore

DAY = 86400.0


def _url(dsn: str, dbname: str) -> str:
    return urlsplit(dsn)._replace(path="/" + dbname).geturl()


FILL = """
INSERT INTO execution (execution_id, playbook_name, status, last_seq, created_at, updated_at,
                       finished_at)
SELECT 'x' || i, 'bench', 'ok', {events}, f, f, f
FROM generate_series(1, {executions}) AS i,
     LATERAL (SELECT now() - make_interval(days => CASE WHEN i % 2 = 0 THEN 60 ELSE 1 END)
              AS f) AS t;
INSERT INTO execution_input (execution_id, playbook_text)
SELECT execution_id, 'name: bench' FROM execution;
INSERT INTO event_log (execution_id, seq, type, ts, step, payload)
SELECT e.execution_id, s, 'step.done', e.finished_at - make_interval(secs => {events} - s),
       's' || (s % 10), '{{"result": {{"rows": [1, 2, 3], "note": "a typical small payload"}}}}'
FROM execution e, generate_series(1, {events}) AS s;
INSERT INTO step_state (execution_id, step, status, updated_at)
SELECT e.execution_id, 's' || k, '{{"status": "ok"}}', e.finished_at
FROM execution e, generate_series(0, 9) AS k;
INSERT INTO task_queue (task_id, execution_id, step, status, lease_token, payload)
SELECT e.execution_id || '.s', e.execution_id, 's', 'done', 3, '{{}}' FROM execution e;
INSERT INTO inbox (execution_id, kind) SELECT execution_id, 'outcome' FROM execution;
ANALYZE;
"""

PARTITIONED = """
CREATE TABLE event_log_p (LIKE event_log INCLUDING DEFAULTS) PARTITION BY RANGE (ts);
CREATE TABLE event_log_old PARTITION OF event_log_p
    FOR VALUES FROM ('-infinity') TO (now() - interval '30 days');
CREATE TABLE event_log_new PARTITION OF event_log_p
    FOR VALUES FROM (now() - interval '30 days') TO ('infinity');
-- The primary key must hold the partition key: (execution_id, seq) alone cannot be unique.
ALTER TABLE event_log_p ADD PRIMARY KEY (execution_id, seq, ts);
INSERT INTO event_log_p SELECT * FROM event_log;
ANALYZE event_log_p;
"""


def _claimer(dsn: str, stop: threading.Event, waits: list[float]) -> None:
    """Claims from the live queue (nothing due: the statement's own cost) in a loop."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            started = time.perf_counter()
            conn.execute(
                "UPDATE task_queue SET status = 'leased' WHERE task_id IN (SELECT task_id FROM"
                " task_queue WHERE status = 'queued' AND pool = 'default' ORDER BY priority"
                " DESC, not_before, queue_order LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING 1"
            ).fetchall()
            waits.append(time.perf_counter() - started)
            time.sleep(0.005)


def _reads(conn: psycopg.Connection[Any], table: str, n: int = 200) -> float:
    """Median ms to read one execution's events from `table`."""
    times = []
    for i in range(n):
        started = time.perf_counter()
        conn.execute(
            f"SELECT seq, type, ts, step, payload FROM {table} WHERE execution_id = %s "
            "AND seq > 0 ORDER BY seq",
            (f"x{(i * 7) % 1000 * 2 + 1}",),
        ).fetchall()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--executions", type=int, default=2000)
    parser.add_argument("--events", type=int, default=250)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    name = f"noetl_bench_retention_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = _url(args.dsn, name)
    try:
        store = PostgresStore(url)  # migrates
        with psycopg.connect(url, autocommit=True) as conn:
            started = time.perf_counter()
            script = FILL.format(executions=int(args.executions), events=int(args.events))
            conn.execute(script.encode())
            fill_s = time.perf_counter() - started
            conn.execute(PARTITIONED.encode())
            old_rows = conn.execute(
                "SELECT count(*) FROM event_log_p WHERE ts < now() - interval '30 days'"
            ).fetchone()
            plain_read_ms = _reads(conn, "event_log")
            partitioned_read_ms = _reads(conn, "event_log_p")

            stop, waits = threading.Event(), []  # type: ignore[var-annotated]
            claimer = threading.Thread(target=_claimer, args=(url, stop, waits))
            claimer.start()
            started = time.perf_counter()
            report = store.prune(time.time() - 30 * DAY, dead_letters_before=0, batch=args.batch)
            prune_s = time.perf_counter() - started
            stop.set()
            claimer.join()

            started = time.perf_counter()
            conn.execute("ALTER TABLE event_log_p DETACH PARTITION event_log_old")
            conn.execute("DROP TABLE event_log_old")
            drop_s = time.perf_counter() - started
        store.close()
        print(
            json.dumps(
                {
                    "executions": args.executions,
                    "events_each": args.events,
                    "fill_s": round(fill_s, 2),
                    "pruned_executions": report.executions,
                    "pruned_rows": dict(report.rows),
                    "batches": report.batches,
                    "prune_s": round(prune_s, 3),
                    "event_rows_per_s": round(report.rows["event_log"] / prune_s),
                    "claim_p50_ms_during_prune": round(statistics.median(waits) * 1000, 3),
                    "claim_max_ms_during_prune": round(max(waits) * 1000, 3),
                    "partition_rows_dropped": None if old_rows is None else old_rows[0],
                    "partition_detach_drop_s": round(drop_s, 3),
                    "read_one_execution_ms_plain": plain_read_ms,
                    "read_one_execution_ms_partitioned_2": partitioned_read_ms,
                },
                indent=1,
            )
        )
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
