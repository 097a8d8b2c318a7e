"""Session validation latency: how long `Sessions.check` (what the API does for a session
bearer credential) takes on a session store.

    python bench/sessions.py                      # NATS K/V at nats://127.0.0.1:4222
    python bench/sessions.py --backend sqlite     # the database store, for comparison

Opens `--sessions` sessions in a scratch bucket (or a scratch SQLite file), checks them
round-robin `--n` times after `--warmup` unmeasured checks, and prints one JSON object:
backend, n, sessions, p50_ms, p95_ms, p99_ms, mean_ms, max_ms. Each check is one K/V read
(a session is touched at most once a minute, so none is written during the run). The
scratch bucket is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import nats

from noetl.auth import ApiToken, Role
from noetl.sessions import Sessions, SessionStore
from noetl.sessions.nats import NatsSessionStore
from noetl.store import SqliteStore


def _drop_bucket(url: str, bucket: str) -> None:
    async def drop() -> None:
        nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=1)
        try:
            await nc.jetstream().delete_key_value(bucket)
        finally:
            await nc.close()

    asyncio.run(drop())


def measure(store: SessionStore, n: int, sessions: int, warmup: int) -> list[float]:
    """Milliseconds of each of `n` checks."""
    token = ApiToken("tok_bench", "bench", Role.VIEWER, "0" * 64, created_at=time.time())
    manager = Sessions(store, ttl_s=3600)
    secrets = [manager.login(token, now=time.time())[0] for _ in range(sessions)]
    now = time.time()  # one instant: no check is a minute past its session's last touch
    for i in range(warmup):
        if manager.check(secrets[i % sessions], now) is None:
            raise SystemExit("a session was refused during the warm-up")
    timings = []
    clock = time.perf_counter
    for i in range(n):
        started = clock()
        found = manager.check(secrets[i % sessions], now)
        timings.append((clock() - started) * 1000)
        if found is None:
            raise SystemExit("a session was refused")
    return timings


def figures(backend: str, timings: list[float], sessions: int) -> dict[str, Any]:
    ordered = sorted(timings)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3)

    return {
        "backend": backend,
        "n": len(timings),
        "sessions": sessions,
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "mean_ms": round(statistics.fmean(timings), 3),
        "max_ms": round(ordered[-1], 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["nats", "sqlite"], default="nats")
    parser.add_argument(
        "--nats", default=os.environ.get("NOETL_BENCH_NATS_URL", "nats://127.0.0.1:4222")
    )
    parser.add_argument("--n", type=int, default=5000, help="checks measured")
    parser.add_argument("--sessions", type=int, default=100, help="sessions opened")
    parser.add_argument("--warmup", type=int, default=500)
    args = parser.parse_args(argv)
    if args.backend == "nats":
        bucket = f"noetl_bench_{uuid.uuid4().hex[:8]}"
        store: SessionStore = NatsSessionStore(args.nats, bucket=bucket, ttl_s=600)
        try:
            timings = measure(store, args.n, args.sessions, args.warmup)
        finally:
            store.close()
            _drop_bucket(args.nats, bucket)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            db = SqliteStore(Path(tmp) / "noetl.db")
            try:
                timings = measure(db.sessions, args.n, args.sessions, args.warmup)
            finally:
                db.close()
    print(json.dumps(figures(args.backend, timings, args.sessions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
