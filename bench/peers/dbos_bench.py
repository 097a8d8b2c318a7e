"""The NoETL benchmark workloads written for DBOS Transact (durable workflows in-process).

    bench/peers/.venv/bin/python bench/peers/dbos_bench.py --workload chain --n 1000 \
        --mode sqlite --json

- chain (W1): one workflow calling n steps in sequence, each adding 1 to the previous result.
- fanout (W2): one workflow enqueuing n trivial steps on a queue (worker_concurrency 64) and
  collecting their results into a list; queues are DBOS's way to run steps in parallel.
- join (W3): n runs started at once (DBOS.start_workflow) of a workflow that enqueues steps
  A and B (each adding 1, run in parallel by the queue) and then runs a join step adding 1 to
  their sum; figures per step (4 a run, as bench/run.py counts its own) and runs/s.
- burst (W4): n runs of a 5-step workflow started at once (DBOS.start_workflow), then all
  awaited; figures per step (5 a run) and runs/s.

`--mode sqlite` keeps the system database in a scratch SQLite file; `--mode postgres` in a
scratch PostgreSQL database `peer_bench_<pid>` (created and dropped around the run). The
clock runs from the call that starts the workflow(s) to the last result, after a warm-up run
of the same workload with n=5. Queue polling interval: DBOS_BENCH_POLL seconds (default
0.01, used for the queue and for awaiting enqueued steps; DBOS's own default is 1.0 for
both, which bounds W2/W3 by the poll, not by DBOS's work). `--timeout` (default 600 s)
bounds the whole script: past it, it prints a JSON object with an "error" field and exits 1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from common import (
    RssSampler,
    check,
    emit,
    figures,
    hard_timeout,
    parse_args,
    pg_url,
    scratch_dir,
    scratch_postgres,
    timed,
)
from dbos import DBOS, DBOSConfig

POLL = float(os.environ.get("DBOS_BENCH_POLL", "0.01"))
QUEUE = "bench"


@DBOS.step()
def add_one(v: int) -> int:
    return v + 1


@DBOS.step()
def double(x: int) -> int:
    return x * 2


@DBOS.workflow()
def chain(n: int) -> int:
    v = 0
    for _ in range(n):
        v = add_one(v)
    return v


@DBOS.workflow()
def fanout(n: int) -> list[int]:
    queue = DBOS.retrieve_queue(QUEUE)
    handles = [queue.enqueue(double, x) for x in range(n)]
    return [handle.get_result(polling_interval_sec=POLL) for handle in handles]


@DBOS.workflow()
def join() -> int:
    queue = DBOS.retrieve_queue(QUEUE)
    a = queue.enqueue(add_one, 1)
    b = queue.enqueue(add_one, 2)
    a_value = int(a.get_result(polling_interval_sec=POLL))
    return add_one(a_value + int(b.get_result(polling_interval_sec=POLL)))


@DBOS.workflow()
def five() -> int:
    v = 0
    for _ in range(5):
        v = add_one(v)
    return v


def run(workload: str, n: int) -> Any:
    if workload == "chain":
        return DBOS.start_workflow(chain, n).get_result()
    if workload == "fanout":
        return DBOS.start_workflow(fanout, n).get_result()
    runs = join if workload == "join" else five
    handles = [DBOS.start_workflow(runs) for _ in range(n)]
    return [handle.get_result() for handle in handles]


def bench(workload: str, n: int, db_url: str, mode: str) -> dict[str, Any]:
    config: DBOSConfig = {
        "name": "peer_bench",
        "system_database_url": db_url,
        "log_level": "WARNING",
        "run_admin_server": False,
    }
    DBOS(config=config)
    try:
        DBOS.launch()
        DBOS.register_queue(QUEUE, worker_concurrency=64, polling_interval_sec=POLL)
        check(workload, 5, run(workload, 5))  # warm-up
        with RssSampler() as rss:
            result, wall = timed(run, workload, n)
    finally:
        DBOS.destroy(destroy_registry=False)
    check(workload, n, result)
    return figures(workload, f"dbos-{mode}", 1, n=n, wall=wall, peak_kb=rss.peak_kb)


def main() -> int:
    args = parse_args(__doc__.splitlines()[0], ["sqlite", "postgres"])
    hard_timeout(args, f"dbos-{args.mode}")
    if args.mode == "sqlite":
        with scratch_dir("dbos_bench_") as tmp:
            url = f"sqlite:///{Path(tmp) / 'dbos.sqlite'}"
            result = bench(args.workload, args.n, url, args.mode)
    else:
        with scratch_postgres() as database:
            result = bench(args.workload, args.n, pg_url(database, "psycopg"), args.mode)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
