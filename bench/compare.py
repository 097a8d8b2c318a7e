"""NoETL against its peers (DBOS, Prefect 3) on the same machine, same workloads.

    bench/peers/setup.sh                  # once: the peers' virtualenv
    python bench/compare.py --json --quick

Runs bench/run.py (ours) and bench/peers/*_bench.py (in bench/peers/.venv) one after the
other, alternating ours and the peers, for W1 chain and W2 fanout:

- embedded (SQLite) against DBOS with a SQLite system database and Prefect with its
  ephemeral API server on SQLite;
- postgres (server + 1 worker process) against DBOS on PostgreSQL.

Each figure is normalised to milliseconds per step (W1) or per item (W2), and our advantage
is the peer's time per step or item divided by ours (above 1: we are faster). Peers may run
a smaller n than ours where they are slow; the figures are per step or item either way.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "bench" / "peers"
PEER_PYTHON = PEERS / ".venv" / "bin" / "python"

# (workload, our mode, peer, peer mode); n per (quick, workload, who).
PAIRS = [
    ("chain", "embedded", "dbos", "sqlite"),
    ("chain", "embedded", "prefect", "sqlite"),
    ("chain", "postgres", "dbos", "postgres"),
    ("fanout", "embedded", "dbos", "sqlite"),
    ("fanout", "embedded", "prefect", "sqlite"),
    ("fanout", "postgres", "dbos", "postgres"),
]
SIZES = {
    True: {"chain": {"ours": 200, "peer": 100}, "fanout": {"ours": 1000, "peer": 200}},
    False: {"chain": {"ours": 1000, "peer": 500}, "fanout": {"ours": 10000, "peer": 1000}},
}


def _run_json(cmd: list[str], timeout: float) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {proc.returncode}: {' | '.join(tail)}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def ours(workload: str, mode: str, n: int, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "bench/run.py", "--workload", workload, "--mode", mode]
    cmd += ["--n", str(n), "--json"]
    if mode == "postgres":
        cmd += ["--workers", "1"]
    return _run_json(cmd, timeout)


def peer(name: str, workload: str, mode: str, n: int, timeout: float) -> dict[str, Any]:
    cmd = [str(PEER_PYTHON), f"bench/peers/{name}_bench.py", "--workload", workload]
    cmd += ["--mode", mode, "--n", str(n), "--json"]
    return _run_json(cmd, timeout)


def per_unit_ms(result: dict[str, Any]) -> float | None:
    """Milliseconds per step (chain) or per item (fanout)."""
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


def compare(quick: bool, rounds: int, timeout: float) -> dict[str, Any]:
    sizes = SIZES[quick]
    measured: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for workload, our_mode, name, peer_mode in PAIRS:
            # Ours, then the peer, pair by pair, so drift on the machine hits both alike.
            ours_key = ("noetl", workload, our_mode)
            n_ours = sizes[workload]["ours"]
            measured.setdefault(ours_key, []).append(ours(workload, our_mode, n_ours, timeout))
            n_peer = sizes[workload]["peer"]
            result = peer(name, workload, peer_mode, n_peer, timeout)
            measured.setdefault((name, workload, peer_mode), []).append(result)
    rows = []
    for workload, our_mode, name, peer_mode in PAIRS:
        ours_ms = _median_ms(measured[("noetl", workload, our_mode)])
        peer_ms = _median_ms(measured[(name, workload, peer_mode)])
        rows.append(
            {
                "workload": workload,
                "ours": f"noetl-{our_mode}",
                "peer": f"{name}-{peer_mode}",
                "unit": "ms per step" if workload == "chain" else "ms per item",
                "ours_ms": _round(ours_ms),
                "peer_ms": _round(peer_ms),
                "our_advantage": _round(peer_ms / ours_ms if ours_ms and peer_ms else None, 1),
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


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="small n (about 2 minutes)")
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
    for run in report["runs"]:
        print("  run:", json.dumps(run))
    print(f"{'workload':<8} {'ours':<16} {'peer':<16} {'unit':<12} ours   peer   advantage")
    for row in report["comparison"]:
        print(
            f"{row['workload']:<8} {row['ours']:<16} {row['peer']:<16} {row['unit']:<12} "
            f"{row['ours_ms']}  {row['peer_ms']}  x{row['our_advantage']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
