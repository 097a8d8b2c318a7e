"""W1 and W2 on a database holding a long history, against an empty one.

    python bench/history.py --executions 1000000 --workers 2 --rounds 3 --json

Two fresh PostgreSQL databases: one stays empty; in the other a server and workers run a
W4 execution (five steps) and a 20-item loop, and every row of those two executions (the
execution, its events, step states, queue rows, inputs, results) is then copied
`--executions` times in all, with timestamps `--age` days old (31 to 330 by default), as
months of finished work leave them, and new ids that begin with those times, as the ids
of executions started then do. Then W1 (`--chain` steps) and W2 (`--fanout` items) run on each
database in turn (empty, long, empty, long, ...: the machine's speed drifts), each on its
own server and workers. Prints the medians per database and the ratio long / empty.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import psycopg
from cluster import cluster
from run import _scratch_database, burst_playbook, chain_playbook, fanout_playbook

CHUNK = 20_000  # copies per statement


def _tables(conn: psycopg.Connection[Any]) -> dict[str, list[tuple[str, str]]]:
    """Each table with an execution_id column: its columns and types, minus generated ones."""
    rows = conn.execute(
        """
        SELECT table_name, column_name, data_type FROM information_schema.columns
        WHERE table_schema = 'public' AND is_identity = 'NO'
          AND coalesce(column_default, '') NOT LIKE 'nextval(%%'
          AND table_name NOT IN (SELECT relname FROM pg_class WHERE relispartition)
          AND table_name IN (
              SELECT table_name FROM information_schema.columns
              WHERE table_schema = 'public' AND column_name = 'execution_id')
        ORDER BY table_name, ordinal_position
        """
    ).fetchall()
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        tables.setdefault(table, []).append((column, kind))
    return tables


def _expression(column: str, kind: str) -> str:
    # an id of the copy's time (its days back, then one ms per copy of that day), its
    # copy number as the last 6 digits
    days = "(%(oldest)s - g %% %(span)s)"
    new_id = (
        f"lpad((left(%(id)s, 13)::bigint - {days}::bigint * 86400000 - g / %(span)s)::text,"
        " 13, '0') || lpad((g %% 1000000)::text, 6, '0')"
    )
    if column == "execution_id":
        return new_id
    if kind == "text":
        return f"replace({column}, %(id)s, {new_id})"
    if kind == "jsonb":
        return f"replace({column}::text, %(id)s, {new_id})::jsonb"
    if kind.startswith("timestamp"):
        return f"{column} - make_interval(days => {days}) - g / %(span)s * interval '1 ms'"
    return column


def copy_history(db: str, templates: list[str], executions: int, age: tuple[int, int]) -> float:
    """Copy the rows of `templates` until `executions` executions exist, `age` (days,
    newest and oldest) old; seconds spent."""
    started = time.perf_counter()
    each = executions // len(templates)
    if each >= 1_000_000:
        raise ValueError("at most 999,999 copies of each template (their ids' last 6 digits)")
    youngest, oldest = age
    with psycopg.connect(db, autocommit=True) as conn:
        tables = _tables(conn)
        # the execution row first: the other tables reference it
        order = ["execution", *sorted(t for t in tables if t != "execution")]
        for template in templates:
            for low in range(1, each + 1, CHUNK):
                high = min(low + CHUNK - 1, each)
                with conn.transaction():
                    for table in order:
                        columns = tables[table]
                        names = ", ".join(c for c, _ in columns)
                        values = ", ".join(_expression(c, k) for c, k in columns)
                        conn.execute(
                            f"INSERT INTO {table} ({names}) SELECT {values} "
                            f"FROM {table}, generate_series(%(low)s::int, %(high)s::int) AS g "
                            "WHERE execution_id = %(id)s",
                            {
                                "id": template,
                                "low": low,
                                "high": high,
                                "oldest": oldest,
                                "span": oldest - youngest + 1,
                            },
                        )
        conn.execute("VACUUM ANALYZE")
        # Written out before the clock: a database holding months of history is not in
        # the middle of flushing them (the copy and the VACUUM leave gigabytes of dirty
        # pages, whose writes would otherwise run through the first rounds).
        conn.execute("CHECKPOINT")
    return time.perf_counter() - started


def _measure(db: str, workers: int, chain: int, fanout: int) -> dict[str, float]:
    with cluster(db, workers) as running:
        _, w1 = running.run(chain_playbook(chain))
        _, w2 = running.run(fanout_playbook(fanout))
    return {"w1_ms_per_step": w1 * 1000 / chain, "w2_items_per_s": fanout / w2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chain", type=int, default=1000, help="W1 steps")
    parser.add_argument("--fanout", type=int, default=10_000, help="W2 items")
    parser.add_argument(
        "--pg",
        default=os.environ.get("NOETL_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument(
        "--age",
        default="31:330",
        help="the history's age in days, youngest:oldest (0:300 puts some of it in the "
        "partition new executions write to)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    youngest, _, oldest = args.age.partition(":")
    age = (int(youngest), int(oldest))
    if not 0 <= age[0] <= age[1]:
        parser.error("--age: youngest:oldest, 0 <= youngest <= oldest")
    with _scratch_database(args.pg) as empty, _scratch_database(args.pg) as long:
        with cluster(long, args.workers) as running:
            templates, _ = running.run(burst_playbook())
            looped, _ = running.run(fanout_playbook(20))
        copy_s = copy_history(long, templates + looped, args.executions, age)
        with psycopg.connect(long, autocommit=True) as conn:
            row = conn.execute(
                "SELECT (SELECT count(*) FROM execution), (SELECT count(*) FROM event_log), "
                "pg_database_size(current_database())"
            ).fetchone()
            # the events that share the partition the runs write to (0018 partitions
            # event_log by execution id, so by start time)
            part = conn.execute(
                "SELECT name FROM noetl_partitions('event_log') "
                "WHERE coalesce(lo, '') <= noetl_id_at(now()) AND noetl_id_at(now()) < hi"
            ).fetchone()
            shared = conn.execute(f"SELECT count(*) FROM {part[0]}").fetchone() if part else None
        assert row is not None
        runs: dict[str, list[dict[str, float]]] = {"empty": [], "long": []}
        for _ in range(args.rounds):
            for name, db in (("empty", empty), ("long", long)):
                runs[name].append(_measure(db, args.workers, args.chain, args.fanout))
    medians = {
        name: {key: round(statistics.median(r[key] for r in found), 3) for key in found[0]}
        for name, found in runs.items()
    }
    base, full = medians["empty"], medians["long"]
    figures = {
        "executions": int(row[0]),
        "events": int(row[1]),
        "events_in_the_runs_partition": None if shared is None else int(shared[0]),
        "database_mb": round(int(row[2]) / 2**20),
        "copy_s": round(copy_s, 1),
        "age_days": args.age,
        "workers": args.workers,
        "rounds": args.rounds,
        "empty": medians["empty"],
        "long": medians["long"],
        # above 1: slower on the long history
        "w1_ratio": round(full["w1_ms_per_step"] / base["w1_ms_per_step"], 3),
        "w2_ratio": round(base["w2_items_per_s"] / full["w2_items_per_s"], 3),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>14}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
