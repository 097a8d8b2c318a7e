"""The NoETL benchmark workloads written for Prefect 3 (flows and tasks, local API server).

    bench/peers/.venv/bin/python bench/peers/prefect_bench.py --workload chain --n 200 \
        --mode sqlite --json

- chain (W1): one flow calling n tasks in sequence, each adding 1 to the previous result.
- fanout (W2): one flow mapping a trivial task over range(n) (`task.map`) on a
  ThreadPoolTaskRunner(max_workers=64) and collecting the results into a list.
- join (W3): n flow runs started at once (one thread per run: a sync flow call runs in its
  caller's thread), each submitting tasks A and B (each adding 1) and then running a join task
  adding 1 to their sum; figures per step (4 a run, as bench/run.py counts its own) and runs/s.
- burst (W4): n flow runs of a 5-task flow started at once (one thread per run), then awaited.

No PREFECT_API_URL is set, so Prefect starts its ephemeral API server (a subprocess, counted
in peak RSS) on a scratch PREFECT_HOME: `--mode sqlite` keeps its database in a SQLite file
there, `--mode postgres` in a scratch PostgreSQL database `peer_bench_<pid>`. The server is
started by one flow run in the main thread first (its start is not thread-safe); the clock
runs from the flow call(s) to the result(s), after a warm-up run (n=5) of the same workload.

What shapes W3/W4 on SQLite: concurrent flow-run writes make the server answer 503 ("database
is locked") and the client retry after 2, 4, 8... s (with jitter, 5 retries); the output's
`api_retries` counts those retries over the timed run. Each sync flow run also joins its
heartbeat thread on exit, which sleeps in 1 s slices (up to 1 s per run, overlapping when runs
are concurrent). `--timeout` (default 600 s) bounds the whole script: past it, it prints a
JSON object with an "error" field, ends the API server and exits 1.
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
    error_result,
    figures,
    hard_timeout,
    parse_args,
    pg_url,
    scratch_dir,
    scratch_postgres,
    stop_children,
    timed,
)

# Where the run is, for the message of the hard timeout.
STATE: dict[str, Any] = {"phase": "importing Prefect", "retries": None}


def why_stuck() -> str:
    why = f" while {STATE['phase']}"
    retries = STATE["retries"]
    if retries is not None and retries.count:
        why += (
            f"; the API client retried {retries.count} requests so far (Prefect's server"
            " answers concurrent writes on SQLite with 503, database is locked, and its"
            " client retries after 2, 4, 8... s)"
        )
    return why


def bench(workload: str, n: int, mode: str) -> dict[str, Any]:
    # Prefect reads its settings when first imported, so the environment comes first.
    from prefect_flows import RetryCounter, run, start_server  # noqa: PLC0415

    retries = STATE["retries"] = RetryCounter()
    try:
        STATE["phase"] = "starting the API server"
        start_server()
        STATE["phase"] = "warming up (n=5)"
        check(workload, 5, run(workload, 5))
        STATE["phase"] = f"running the timed {workload} (n={n})"
        before = retries.count
        with RssSampler() as rss:
            result, wall = timed(run, workload, n)
    finally:
        # End the API server here, before its database goes: left to Prefect's exit hooks, a
        # late client call from a background thread can start a new ephemeral server that
        # outlives this process.
        stop_children()
    check(workload, n, result)
    out = figures(workload, f"prefect-{mode}", 1, n=n, wall=wall, peak_kb=rss.peak_kb)
    out["api_retries"] = retries.count - before
    return out


def main() -> int:
    args = parse_args(__doc__.splitlines()[0], ["sqlite", "postgres"])
    mode = f"prefect-{args.mode}"
    hard_timeout(args, mode, why_stuck)
    code = 0
    with scratch_dir("prefect_bench_") as home:
        os.environ.pop("PREFECT_API_URL", None)
        os.environ.update(
            PREFECT_HOME=home,
            PREFECT_LOGGING_LEVEL="WARNING",
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            PREFECT_SERVER_ALLOW_EPHEMERAL_MODE="true",
        )
        try:
            if args.mode == "sqlite":
                url = f"sqlite+aiosqlite:///{Path(home) / 'prefect.db'}"
                os.environ["PREFECT_API_DATABASE_CONNECTION_URL"] = url
                result = bench(args.workload, args.n, args.mode)
            else:
                with scratch_postgres() as database:
                    url = pg_url(database, "asyncpg")
                    os.environ["PREFECT_API_DATABASE_CONNECTION_URL"] = url
                    result = bench(args.workload, args.n, args.mode)
        except (Exception, SystemExit) as exc:  # one JSON line either way
            result = error_result(args.workload, mode, args.n, f"{type(exc).__name__}: {exc}")
            code = 1
        emit(result, args.json)
    return code


if __name__ == "__main__":
    exit_code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)  # without Prefect's exit hooks (the server is gone already)
