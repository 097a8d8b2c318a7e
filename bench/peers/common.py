"""Shared pieces of the peer benchmarks: figures, RSS sampling, scratch databases.

Runs inside bench/peers/.venv (no NoETL imports); the RSS sampler comes from bench/rss.py,
which uses the standard library only. Figures use the same JSON keys as bench/run.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rss import RssSampler

__all__ = [
    "RssSampler",
    "check",
    "emit",
    "figures",
    "parse_args",
    "pg_url",
    "scratch_postgres",
    "timed",
]

WORKLOADS = ["chain", "fanout", "join", "burst"]
STEPS_PER_RUN = {"join": 4, "burst": 5}  # as bench/run.py counts them (join: start, A, B, join)
DEFAULT_N = {"chain": 1000, "fanout": 10000, "join": 200, "burst": 500}
ADMIN_DSN = os.environ.get("NOETL_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@contextlib.contextmanager
def scratch_postgres(prefix: str = "peer_bench") -> Iterator[str]:
    """Create the database `<prefix>_<pid>`, yield its name, drop it afterwards."""
    import psycopg  # noqa: PLC0415 - only postgres mode needs it

    name = f"{prefix}_{os.getpid()}"
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_url(database: str, driver: str) -> str:
    """`postgresql+<driver>://...` for `database` on the admin DSN's server."""
    rest = ADMIN_DSN.split("://", 1)[1].rsplit("/", 1)[0]
    return f"postgresql+{driver}://{rest}/{database}"


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - started


def check(workload: str, n: int, result: Any) -> None:
    expected: Any
    if workload == "chain":
        expected = n
    elif workload == "fanout":
        expected = [2 * x for x in range(n)]
    elif workload == "join":
        expected = [6] * n  # A = 1 + 1, B = 2 + 1, join = A + B + 1 (as bench/run.py)
    else:
        expected = [5] * n  # five steps, each adding 1
    if result != expected:
        shown = result if not isinstance(result, list) else f"list of {len(result)}"
        raise SystemExit(f"{workload} computed {shown!r}, not the expected value")


def figures(
    workload: str, mode: str, workers: int, *, n: int, wall: float, peak_kb: int
) -> dict[str, Any]:
    """Same keys and rules as bench/run.py: chain per step; fanout items/s; join and burst
    per step over all runs (4 and 5 steps a run) and runs/s."""
    steps = n * STEPS_PER_RUN[workload] if workload in STEPS_PER_RUN else n
    return {
        "workload": workload,
        "mode": mode,
        "workers": workers,
        "n": n,
        "wall_s": round(wall, 4),
        "per_step_ms": round(wall * 1000 / steps, 4) if workload != "fanout" else None,
        "items_per_s": round(n / wall, 1) if workload != "chain" else None,
        "peak_rss_mb": round(peak_kb / 1024, 1),
    }


def parse_args(description: str, modes: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--mode", choices=modes, default=modes[0])
    parser.add_argument("--n", type=int, default=None, help="steps, items or runs")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    args.n = args.n or DEFAULT_N[args.workload]
    return args


def emit(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result), flush=True)
    else:
        for key, value in result.items():
            print(f"{key:>12}: {value}")
