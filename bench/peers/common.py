"""Shared pieces of the peer benchmarks: figures, RSS sampling, scratch databases.

Runs inside bench/peers/.venv (no NoETL imports), so it repeats the few helpers of
bench/run.py that the peers need, with the same JSON keys.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

WORKLOADS = ["chain", "fanout", "join", "burst"]
STEPS_PER_RUN = {"join": 4, "burst": 5}  # as bench/run.py counts them (join: start, A, B, join)
DEFAULT_N = {"chain": 1000, "fanout": 10000, "join": 200, "burst": 500}
ADMIN_DSN = os.environ.get("NOETL_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _descendants(pid: int) -> list[int]:
    found = [pid]
    index = 0
    while index < len(found):
        current = found[index]
        index += 1
        try:
            tids = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{current}/task/{tid}/children", encoding="ascii") as fh:
                    found.extend(int(child) for child in fh.read().split())
            except OSError:
                continue
    return found


def _tree_rss_kb(root: int) -> int:
    total = 0
    for pid in _descendants(root):
        try:
            with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
                total += int(fh.read().split()[1]) * _PAGE_KB
        except (OSError, IndexError, ValueError):
            continue
    return total


class RssSampler:
    """Peak resident memory of this process and its descendants, sampled every 100 ms."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        self.peak_kb = max(self.peak_kb, _tree_rss_kb(os.getpid()))


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
