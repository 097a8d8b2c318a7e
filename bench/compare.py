"""NoETL against its peers (DBOS, Prefect 3) on the same machine, same workloads.

    bench/peers/setup.sh                  # once: the peers' virtualenv
    python bench/compare.py --json --quick

Runs bench/run.py (ours) and bench/peers/*_bench.py (in bench/peers/.venv) one after the
other, alternating ours and the peers pair by pair (a configuration already measured in the
round is not run again for the next pair), for W1 chain, W2 fanout, W3 join and W4 burst:

- embedded (SQLite) against DBOS with a SQLite system database and Prefect with its
  ephemeral API server on SQLite (all four workloads);
- postgres (server + 1 worker process, and server + 2 worker processes) against DBOS on
  PostgreSQL (all four workloads).

Each figure is normalised to milliseconds per step (W1), per item (W2) or per execution
(W3, W4: wall time / executions started at once; a W3 execution is A and B in parallel
then a join, a W4 execution five sequential steps), with the throughput (items or executions
per second) next to it for W2-W4. Our advantage is the peer's time per step, item or
execution divided by ours (above 1: we are faster). Peers may run a smaller n than ours where
they are slow; the figures are per step, item or execution either way. A run that fails or
times out is kept in "runs" with its "error" and leaves its figures empty (null).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "bench" / "peers"
PEER_PYTHON = PEERS / ".venv" / "bin" / "python"

# (workload, our mode, our worker processes (postgres), peer, peer mode).
PAIRS = [
    ("chain", "embedded", None, "dbos", "sqlite"),
    ("chain", "embedded", None, "prefect", "sqlite"),
    ("chain", "postgres", 1, "dbos", "postgres"),
    ("chain", "postgres", 2, "dbos", "postgres"),
    ("fanout", "embedded", None, "dbos", "sqlite"),
    ("fanout", "embedded", None, "prefect", "sqlite"),
    ("fanout", "postgres", 1, "dbos", "postgres"),
    ("fanout", "postgres", 2, "dbos", "postgres"),
    ("join", "embedded", None, "dbos", "sqlite"),
    ("join", "embedded", None, "prefect", "sqlite"),
    ("join", "postgres", 1, "dbos", "postgres"),
    ("join", "postgres", 2, "dbos", "postgres"),
    ("burst", "embedded", None, "dbos", "sqlite"),
    ("burst", "embedded", None, "prefect", "sqlite"),
    ("burst", "postgres", 1, "dbos", "postgres"),
    ("burst", "postgres", 2, "dbos", "postgres"),
]
# n per (quick, workload, who): steps (chain), items (fanout) or executions (join, burst).
# Prefect's W3/W4 stay small: on SQLite its concurrent flow runs wait out 503 retries.
SIZES = {
    True: {
        "chain": {"ours": 200, "dbos": 100, "prefect": 100},
        "fanout": {"ours": 1000, "dbos": 200, "prefect": 200},
        "join": {"ours": 50, "dbos": 20, "prefect": 10},
        "burst": {"ours": 50, "dbos": 20, "prefect": 10},
    },
    False: {
        "chain": {"ours": 1000, "dbos": 500, "prefect": 500},
        "fanout": {"ours": 10000, "dbos": 1000, "prefect": 1000},
        "join": {"ours": 200, "dbos": 100, "prefect": 20},
        "burst": {"ours": 500, "dbos": 100, "prefect": 20},
    },
}
UNITS = {"chain": "step", "fanout": "item", "join": "execution", "burst": "execution"}


def _run_json(cmd: list[str], timeout: float) -> dict[str, Any]:
    """Run one benchmark; its last JSON line (figures, or an "error"). The run gets its own
    process group, ended as a whole on timeout (servers and workers included)."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        return {"error": f"timed out after {timeout:.0f}s"}
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    if proc.returncode != 0 or not lines:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        result.setdefault("error", f"exit {proc.returncode}: {' | '.join(tail)}")
    return result


def _end_group(proc: subprocess.Popen[str]) -> None:
    """SIGINT first, so the run's cleanup runs (ours stops its server and workers and drops
    its scratch database); after 30 s, SIGKILL whatever is left in the group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def ours(workload: str, mode: str, workers: int | None, n: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "bench/run.py", "--workload", workload, "--mode", mode]
    cmd += ["--n", str(n), "--json"]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    return _run_json(cmd, timeout)


def peer(name: str, workload: str, mode: str, n: int, timeout: float) -> dict[str, Any]:
    cmd = [str(PEER_PYTHON), f"bench/peers/{name}_bench.py", "--workload", workload]
    # The script's own limit comes first, so it reports why and ends its own servers.
    cmd += ["--mode", mode, "--n", str(n), "--json", "--timeout", str(max(timeout - 30, 10))]
    return _run_json(cmd, timeout)


def per_unit_ms(result: dict[str, Any]) -> float | None:
    """Milliseconds per step (chain), item (fanout) or execution (join, burst)."""
    if "error" in result or not result.get("wall_s"):
        return None
    return float(result["wall_s"]) * 1000 / int(result["n"])


def peer_versions() -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json;"
        "print(json.dumps({p: m.version(p) for p in ('dbos', 'prefect')}))"
    )
    proc = subprocess.run(
        [str(PEER_PYTHON), "-c", code], capture_output=True, text=True, check=False
    )
    return dict(json.loads(proc.stdout)) if proc.returncode == 0 else {}


def _label(mode: str, workers: int | None) -> str:
    return f"noetl-{mode}" if workers is None else f"noetl-{mode}-{workers}w"


def loop_seconds() -> float:
    """The machine's speed of the moment: seconds for ten million additions in a Python
    loop (0.46 s on a quick hour of the test machine, 0.9 s on a slow one). The absolute
    figures of a comparison hold only for an hour as quick as its own."""
    started = time.perf_counter()
    total = 0
    for number in range(10_000_000):
        total += number
    return round(time.perf_counter() - started, 3)


def compare(quick: bool, rounds: int, timeout: float) -> dict[str, Any]:
    sizes = SIZES[quick]
    speed = [loop_seconds()]
    measured: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for _ in range(rounds):
        done: set[tuple[Any, ...]] = set()
        for workload, our_mode, workers, name, peer_mode in PAIRS:
            # Ours, then the peer, pair by pair, so drift on the machine hits both alike.
            ours_key = ("noetl", workload, our_mode, workers)
            if ours_key not in done:
                n_ours = sizes[workload]["ours"]
                result = ours(workload, our_mode, workers, n_ours, timeout)
                measured.setdefault(ours_key, []).append(result)
                done.add(ours_key)
            peer_key = (name, workload, peer_mode)
            if peer_key not in done:
                result = peer(name, workload, peer_mode, sizes[workload][name], timeout)
                measured.setdefault(peer_key, []).append(result)
                done.add(peer_key)
    speed.append(loop_seconds())
    rows = []
    for workload, our_mode, workers, name, peer_mode in PAIRS:
        ours_runs = measured[("noetl", workload, our_mode, workers)]
        peer_runs = measured[(name, workload, peer_mode)]
        ours_ms, peer_ms = _median_ms(ours_runs), _median_ms(peer_runs)
        rows.append(
            {
                "workload": workload,
                "ours": _label(our_mode, workers),
                "peer": f"{name}-{peer_mode}",
                "unit": f"ms per {UNITS[workload]}",
                "ours_ms": _round(ours_ms),
                "peer_ms": _round(peer_ms),
                "our_advantage": _round(peer_ms / ours_ms if ours_ms and peer_ms else None, 1),
                # items (fanout) or executions (join, burst) per second; null for chain
                "ours_per_s": _round(_median_per_s(ours_runs), 1),
                "peer_per_s": _round(_median_per_s(peer_runs), 1),
            }
        )
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "rounds": rounds,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            # `loop_seconds` before the first run and after the last
            "loop_s": speed,
        },
        "peer_versions": peer_versions(),
        "n": sizes,
        "runs": [
            {"who": key[0], **result} for key, results in measured.items() for result in results
        ],
        "comparison": rows,
    }


def _median_ms(results: list[dict[str, Any]]) -> float | None:
    values = [v for v in (per_unit_ms(r) for r in results) if v is not None]
    return statistics.median(values) if values else None


def _median_per_s(results: list[dict[str, Any]]) -> float | None:
    values = [float(r["items_per_s"]) for r in results if "error" not in r and r.get("items_per_s")]
    return statistics.median(values) if values else None


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="small n (a few minutes)")
    parser.add_argument("--rounds", type=int, default=1, help="alternations (median kept)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    args = parser.parse_args(argv)
    if not PEER_PYTHON.exists():
        print(
            f"The peers' virtualenv is missing ({PEER_PYTHON.relative_to(ROOT)}).\n"
            "Create it with: bash bench/peers/setup.sh",
            file=sys.stderr,
        )
        return 2
    report = compare(args.quick, args.rounds, args.timeout)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['date']}  peers: {report['peer_versions']}  n: {report['n']}")
    print(f"  the machine's speed: {report['machine']['loop_s']} s per 10M additions")
    for run in report["runs"]:
        print("  run:", json.dumps(run))
    print(
        f"{'workload':<8} {'ours':<19} {'peer':<16} {'unit':<17} "
        f"{'ours':>9} {'peer':>9} {'advantage':>9}  per s (ours / peer)"
    )
    for row in report["comparison"]:
        per_s = ""
        if row["ours_per_s"] is not None or row["peer_per_s"] is not None:
            per_s = f"{row['ours_per_s']} / {row['peer_per_s']}"
        print(
            f"{row['workload']:<8} {row['ours']:<19} {row['peer']:<16} {row['unit']:<17} "
            f"{row['ours_ms']!s:>9} {row['peer_ms']!s:>9} {'x' + str(row['our_advantage']):>9}"
            f"  {per_s}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
