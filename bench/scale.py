"""Many executions at once through the API: the server, `--workers` worker processes and
a fresh PostgreSQL database, `--executions` starts of a short playbook (W4's five steps)
posted as fast as eight client threads can.

    python bench/scale.py --executions 10000 --workers 2 --json

Prints one JSON object: executions, workers, wall_s (first request to last terminal
status), executions_per_s, server_peak_rss_mb (the server process), workers_peak_rss_mb
(the workers with their python children), and the checks: ok (executions that ended
`ok` with the right result), lost (started but not `ok`, or missing), run_twice (tasks
with more than one successful outcome in the log).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import psycopg
from cluster import cluster
from rss import RssSampler
from run import BURST_STEPS, _scratch_database, burst_playbook

TWICE = """
SELECT count(*) FROM (
    SELECT execution_id, payload->>'task_id' FROM event_log
    WHERE type = 'tool.processed' AND (payload->>'ok')::boolean
    GROUP BY 1, 2 HAVING count(*) > 1
) AS twice
"""


def _checks(db: str, ids: list[str]) -> dict[str, int]:
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT execution_id, status, context->>'v' FROM execution "
            "WHERE execution_id = ANY(%s)",
            (ids,),
        ).fetchall()
        twice = conn.execute(TWICE).fetchone()
    ok = sum(1 for _, status, v in rows if status == "ok" and v == str(BURST_STEPS))
    return {"ok": ok, "lost": len(ids) - ok, "run_twice": int(twice[0]) if twice else -1}


def run(executions: int, workers: int, admin_dsn: str, concurrency: int | None) -> dict[str, Any]:
    with _scratch_database(admin_dsn) as db, cluster(db, workers, concurrency) as running:
        samplers = [RssSampler(pid=proc.pid) for proc in running.procs]
        for sampler in samplers:
            sampler.__enter__()
        try:
            ids, wall = running.run(burst_playbook(), executions)
        finally:
            for sampler in samplers:
                sampler.__exit__(None, None, None)
        checks = _checks(db, ids)
    return {
        "executions": executions,
        "workers": workers,
        "wall_s": round(wall, 2),
        "executions_per_s": round(executions / wall, 1),
        "server_peak_rss_mb": round(samplers[0].peak_kb / 1024, 1),
        "workers_peak_rss_mb": round(sum(s.peak_kb for s in samplers[1:]) / 1024, 1),
        **checks,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="task slots per worker (default: the worker's own, chosen from the machine)",
    )
    parser.add_argument(
        "--pg",
        default=os.environ.get("NOETL_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    figures = run(args.executions, args.workers, args.pg, args.concurrency)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>20}: {value}")
    return 0 if figures["lost"] == 0 and figures["run_twice"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
