"""The PostgreSQL store's continuation commit alone: what a worker pays per chain step
to the database, without the engine, the python child or the other processes.

    python bench/pg_commit.py --n 2000 --json

On a scratch database, one thread runs a chain of n `complete_and_commit` calls, each as
a worker's continuation makes it (the step's five events, the execution row, the step's
state, the next task enqueued and leased to this worker), and prints the median wall time
per commit, the CPU time of this process per commit, and the round trips per commit (the
socket reads, counted by the kernel when `strace` is installed; else null).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import psycopg

from noetl.core import Event, Task
from noetl.store import Append, ExecutionRecord, PostgresStore
from noetl.store.base import Enqueue, Lease


def _task(step: int) -> Task:
    return Task(
        task_id=f"e1.s{step}",
        execution_id="e1",
        step=f"s{step}",
        kind="python",
        spec={"code": "def main(context, args):\n    return args['v'] + 1\n"},
        args={"v": step},
        context={"v": step},
        key=f"e1:s{step}",
    )


@contextmanager
def _scratch(admin_dsn: str) -> Iterator[str]:
    name = f"noetl_bench_commit_{os.getpid()}_{int(time.time())}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(admin_dsn)._replace(path="/" + name).geturl()
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _step_events(seq: int, step: int, now: float) -> list[Event]:
    """The five events of a chain step's continuation (their shapes, not their meaning)."""
    name = f"s{step}"
    return [
        Event(seq + 1, "tool.processed", "e1", now, name, {"ok": True, "result": step}),
        Event(seq + 2, "step.finished", "e1", now, name, {"status": "ok", "result": step}),
        Event(seq + 3, "next.evaluated", "e1", now, name, {"taken": [f"s{step + 1}"]}),
        Event(seq + 4, "step.called", "e1", now, f"s{step + 1}", {"by": name}),
        Event(seq + 5, "step.started", "e1", now, f"s{step + 1}", {"bind": {"v": step}}),
    ]


def run(dsn: str, n: int) -> list[float]:
    """Seconds per commit of a chain of n continuations."""
    store = PostgresStore(dsn)
    try:
        record = ExecutionRecord("e1", "bench", None, "name: bench\n", created_at=0.0)
        first = Append("e1", 0, [Event(1, "workflow.started", "e1", 0.0)])
        first = Append("e1", 0, first.events, enqueue=[Enqueue(_task(0))], now=0.0)
        store.create_execution(record, first)
        (lease,) = store.claim("w1")
        seq, times = 1, []
        for step in range(n):
            now = time.time()
            append = Append(
                "e1",
                seq,
                _step_events(seq, step, now),
                steps={f"s{step}": {"status": "ok"}, f"s{step + 1}": {"status": "running"}},
                enqueue=[Enqueue(_task(step + 1))],
                now=now,
            )
            started = time.perf_counter()
            leases = store.complete_and_commit(
                lease.task.task_id,
                lease.token,
                append,
                worker_id="w1",
                lease=[f"e1.s{step + 1}"],
            )
            times.append(time.perf_counter() - started)
            assert leases is not None and len(leases) == 1
            lease: Lease = leases[0]
            seq += 5
        return times
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument(
        "--pg",
        default=os.environ.get("NOETL_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # the measured part, under strace when it counts the round trips
        cpu = time.process_time()
        times = run(args.child, args.n)
        cpu = time.process_time() - cpu
        print(json.dumps({"median_ms": statistics.median(times) * 1e3, "cpu_s": cpu}))
        return 0
    with _scratch(args.pg) as dsn:
        timed = subprocess.run(
            [sys.executable, __file__, "--n", str(args.n), "--child", dsn],
            capture_output=True,
            text=True,
            check=True,
        )
    figures = json.loads(timed.stdout.strip().splitlines()[-1])
    reads = None
    strace = shutil.which("strace")
    if strace:  # a shorter chain under strace: it slows every call down
        count = min(args.n, 300)
        with _scratch(args.pg) as dsn:
            traced = subprocess.run(
                [
                    strace,
                    "-f",
                    "-c",
                    "-e",
                    "trace=recvfrom",
                    "-o",
                    "/dev/stderr",
                    sys.executable,
                    __file__,
                    "--n",
                    str(count),
                    "--child",
                    dsn,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
        for line in traced.stderr.splitlines():
            parts = line.split()
            if parts and parts[-1] == "recvfrom":
                reads = int(parts[3]) / count
    result = {
        "n": args.n,
        "median_ms_per_commit": round(figures["median_ms"], 3),
        "cpu_ms_per_commit": round(figures["cpu_s"] / args.n * 1e3, 3),
        "reads_per_commit": None if reads is None else round(reads, 2),
    }
    print(json.dumps(result) if args.json else result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
