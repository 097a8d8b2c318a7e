"""Starts alone: the server without workers, N executions started over the API at once.

    python bench/starts.py --n 500 --json

On a scratch PostgreSQL database, `noetl server start` (no workers), 20 unmeasured starts,
then N `POST /api/executions` of the W4 playbook from 8 client threads (one HTTP client,
as `bench/run.py` starts W3/W4). Prints starts per second, the server's CPU per start and
the database's transactions per start (every transaction of the scratch database: each
request's token look-up and the server's own loops too). What a start costs the server,
without the workers' load on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
from rss import tree_cpu_seconds
from run import _free_port, _scratch_database, _spawn, burst_playbook, wait_healthy

from noetl.auth import Role, issue_token
from noetl.store import open_store

CLIENT_THREADS = 8
WARM = 20


def _transactions(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def run(n: int, admin_dsn: str) -> dict[str, Any]:
    text = burst_playbook()
    with tempfile.TemporaryDirectory() as tmp, _scratch_database(admin_dsn) as db:
        store = open_store(db)
        token, _ = issue_token(store.tokens, role=Role.OPERATOR, name="bench", now=time.time())
        port = _free_port()
        proc = _spawn(["server", "start", "--port", str(port)], db, Path(tmp) / "server.log")
        url = f"http://127.0.0.1:{port}"
        client = httpx.Client(timeout=60, headers={"Authorization": f"Bearer {token}"})

        def post(_: int) -> None:
            client.post(f"{url}/api/executions", json={"playbook": text}).raise_for_status()

        try:
            wait_healthy(url, Path(tmp) / "server.log")
            for i in range(WARM):
                post(i)
            before = (_transactions(db), tree_cpu_seconds(proc.pid))
            started = time.perf_counter()
            with ThreadPoolExecutor(CLIENT_THREADS) as pool:
                list(pool.map(post, range(n)))
            wall = time.perf_counter() - started
            cpu = tree_cpu_seconds(proc.pid) - before[1]
            # The statistics of the last transactions reach pg_stat_database a little later.
            time.sleep(1.0)
            transactions = _transactions(db) - before[0]
        finally:
            client.close()
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            store.close()
    return {
        "n": n,
        "wall_s": round(wall, 3),
        "starts_per_s": round(n / wall, 1),
        "server_cpu_ms_per_start": round(cpu * 1000 / n, 2),
        "transactions_per_start": round(transactions / n, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument(
        "--pg",
        default=os.environ.get("NOETL_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
        help="PostgreSQL DSN used to create a scratch database",
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    figures = run(args.n, args.pg)
    print(json.dumps(figures) if args.json else figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
