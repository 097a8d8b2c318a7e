"""`bench/run.py` on two checkouts, alternately: the only fair comparison on a machine
whose speed drifts from one hour to the next.

    python bench/pairs.py --against ../old --workload chain --pairs 5
    python bench/pairs.py --against ../old --workload fanout --mode postgres --workers 2

Each pair runs the other checkout (`--against`, "old") and then this one ("new"), each in
a fresh process with its own checkout first on PYTHONPATH, with the same arguments (the
ones after the known ones go to `bench/run.py` as they are). Prints each run, the medians
and the ratio new / old of the medians and the median of the pairs' ratios: of the time
per step (chain, join and burst) or of the throughput (fanout). With `--cpu` (passed on
to `bench/run.py`), also the median CPU seconds of the server, the workers and PostgreSQL
on each side: steadier than the time when the machine's speed moves. One JSON object
with `--json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent


def _run(checkout: Path, args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, str(checkout / "bench" / "run.py"), *args, "--json"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench/run.py failed in {checkout}:\n{done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    # `--cpu`: bench/run.py prints the CPU seconds of each role to stderr.
    for line in reversed(done.stderr.splitlines()):
        if line.startswith('{"cpu_s"'):
            figures["cpu_s"] = json.loads(line)["cpu_s"]
            break
    return figures


def _figure(result: dict[str, Any]) -> float:
    """Time per step where there is one (lower is better), else items per second."""
    value = result.get("per_step_ms")
    return float(value if value is not None else result["items_per_s"])


def _cpu(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """The median CPU seconds of each role (server, workers, postgres) on each side, and
    their ratio new / old (`--cpu`)."""
    out: dict[str, dict[str, float]] = {}
    for role in runs["old"][0]["cpu_s"]:
        old = statistics.median(r["cpu_s"][role] for r in runs["old"])
        new = statistics.median(r["cpu_s"][role] for r in runs["new"])
        out[role] = {"old": old, "new": new, "ratio": round(new / old, 3) if old else 0.0}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True, help="the other checkout")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args, passed = parser.parse_known_args(argv)
    sides = {"old": args.against.resolve(), "new": HERE}
    runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for number in range(args.pairs):
        for side, checkout in sides.items():
            result = _run(checkout, passed)
            runs[side].append(result)
            if not args.json:
                print(f"pair {number + 1} {side}: {_figure(result):g}", flush=True)
    old = [_figure(r) for r in runs["old"]]
    new = [_figure(r) for r in runs["new"]]
    timed = runs["new"][0].get("per_step_ms") is not None
    ratios = [n / o for n, o in zip(new, old, strict=True)]
    summary = {
        "arguments": passed,
        "pairs": args.pairs,
        "measure": "ms per step" if timed else "items per s",
        "old": old,
        "new": new,
        "old_median": statistics.median(old),
        "new_median": statistics.median(new),
        "ratio_of_medians": round(statistics.median(new) / statistics.median(old), 3),
        "median_of_ratios": round(statistics.median(ratios), 3),
        "old_peak_rss_mb": max(r.get("peak_rss_mb") or 0 for r in runs["old"]),
        "new_peak_rss_mb": max(r.get("peak_rss_mb") or 0 for r in runs["new"]),
    }
    if all("cpu_s" in r for r in runs["old"] + runs["new"]):
        summary["cpu_s"] = _cpu(runs)
    if args.json:
        print(json.dumps(summary))
    else:
        better = "lower" if timed else "higher"
        print(
            f"{summary['measure']}: old {summary['old_median']:g}, new {summary['new_median']:g};"
            f" new / old {summary['ratio_of_medians']} (medians),"
            f" {summary['median_of_ratios']} (pairs); {better} is better"
        )
        for role, cpu in summary.get("cpu_s", {}).items():
            print(f"cpu s, {role}: old {cpu['old']:g}, new {cpu['new']:g}; ratio {cpu['ratio']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
