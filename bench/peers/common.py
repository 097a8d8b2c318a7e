"""Shared pieces of the peer benchmarks: figures, RSS sampling, scratch databases, a hard
time limit.

Runs inside bench/peers/.venv (no NoETL imports); the RSS sampler comes from bench/rss.py,
which uses the standard library only. Figures use the same JSON keys as bench/run.py; a run
that fails or passes its time limit prints one JSON object with an "error" field instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rss import RssSampler, _descendants

__all__ = [
    "RssSampler",
    "check",
    "emit",
    "error_result",
    "figures",
    "hard_timeout",
    "parse_args",
    "pg_url",
    "scratch_dir",
    "scratch_postgres",
    "stop_children",
    "timed",
]

WORKLOADS = ["chain", "fanout", "join", "burst"]
STEPS_PER_RUN = {"join": 4, "burst": 5}  # as bench/run.py counts them (join: start, A, B, join)
DEFAULT_N = {"chain": 1000, "fanout": 10000, "join": 200, "burst": 500}
ADMIN_DSN = os.environ.get("NOETL_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


# Run when the hard time limit passes (newest first): what the `with` blocks would undo.
_CLEANUPS: list[Callable[[], None]] = []


@contextlib.contextmanager
def _cleanup_on_timeout(fn: Callable[[], None]) -> Iterator[None]:
    _CLEANUPS.append(fn)
    try:
        yield
    finally:
        _CLEANUPS.remove(fn)
        fn()


@contextlib.contextmanager
def scratch_postgres(prefix: str = "peer_bench") -> Iterator[str]:
    """Create the database `<prefix>_<pid>`, yield its name, drop it afterwards."""
    import psycopg  # noqa: PLC0415 - only postgres mode needs it

    name = f"{prefix}_{os.getpid()}"

    def drop() -> None:
        with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    drop()
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    with _cleanup_on_timeout(drop):
        yield name


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A new temporary directory, removed afterwards (also when the time limit passes)."""
    import tempfile  # noqa: PLC0415

    path = tempfile.mkdtemp(prefix=prefix)
    with _cleanup_on_timeout(lambda: shutil.rmtree(path, ignore_errors=True)):
        yield path


def stop_children(grace: float = 5.0) -> None:
    """SIGTERM every process below this one (e.g. Prefect's API server), SIGKILL what is
    still there after `grace` seconds."""
    children = _descendants(os.getpid())[1:]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            children = [pid for pid in children if _alive(pid)]
            if not children:
                return
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False  # our child, now reaped
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def hard_timeout(
    args: argparse.Namespace, mode: str, why: Callable[[], str] = lambda: ""
) -> threading.Timer:
    """After `args.timeout` seconds: print a JSON error (ending with `why()`), end child
    processes, undo the scratch databases and directories, and exit 1 at once (stuck threads
    are not waited for)."""

    def expire() -> None:
        message = f"no result after {args.timeout:.0f} s (hard timeout){why()}"
        emit(error_result(args.workload, mode, args.n, message), args.json)
        stop_children()
        for fn in reversed(_CLEANUPS):
            with contextlib.suppress(Exception):
                fn()
        os._exit(1)

    timer = threading.Timer(args.timeout, expire)
    timer.daemon = True
    timer.start()
    return timer


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
    per step over all runs (4 and 5 steps a run, counted as bench/run.py counts its own) and
    runs (executions) per second in items_per_s."""
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


def error_result(workload: str, mode: str, n: int, error: str) -> dict[str, Any]:
    return {"workload": workload, "mode": mode, "workers": 1, "n": n, "error": error}


def parse_args(description: str, modes: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--workload", choices=WORKLOADS, required=True)
    parser.add_argument("--mode", choices=modes, default=modes[0])
    parser.add_argument("--n", type=int, default=None, help="steps, items or runs")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds; past them, print a JSON error"
    )
    args = parser.parse_args()
    args.n = args.n or DEFAULT_N[args.workload]
    return args


def emit(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result), flush=True)
    else:
        for key, value in result.items():
            print(f"{key:>12}: {value}")
