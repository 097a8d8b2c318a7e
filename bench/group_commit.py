"""The group commit alone (noetl.decision.group_commit), this checkout against another.

    python bench/group_commit.py --against ../old --threads 24 --rounds 3

T threads each submit 300 items, one at a time, to a `GroupCommit` whose call sleeps
0.4 ms (about a commit's round trip); old and new alternately, each round. Prints, per
run, the process's CPU per submitted item (what the waiting and waking cost, the call
being a sleep) and how many calls were made (fewer: fuller batches).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent.parent
MODULE = Path("noetl/decision/group_commit.py")
PER_THREAD = 300
CALL_S = 0.0004


def _load(checkout: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, checkout / MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(module: ModuleType, threads: int) -> dict[str, float]:
    def call(items: list[int]) -> list[int]:
        time.sleep(CALL_S)
        return items

    group = module.GroupCommit(call)

    def submitter() -> None:
        for item in range(PER_THREAD):
            group.submit(item)

    workers = [threading.Thread(target=submitter) for _ in range(threads)]
    cpu, wall = time.process_time(), time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    items = threads * PER_THREAD
    return {
        "cpu_us_per_item": round((time.process_time() - cpu) / items * 1e6, 1),
        "wall_s": round(time.perf_counter() - wall, 3),
        "calls": group.calls,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, required=True, help="the other checkout")
    parser.add_argument("--threads", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sides = {"old": _load(args.against, "old_group"), "new": _load(HERE, "new_group")}
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for side, module in sides.items():
            runs[side].append(_run(module, args.threads))
            if not args.json:
                print(side, runs[side][-1])
    summary: dict[str, Any] = {
        side: {
            "cpu_us_per_item": statistics.median(r["cpu_us_per_item"] for r in found),
            "calls": statistics.median(r["calls"] for r in found),
        }
        for side, found in runs.items()
    }
    summary["cpu_new_over_old"] = round(
        summary["new"]["cpu_us_per_item"] / summary["old"]["cpu_us_per_item"], 3
    )
    print(json.dumps(summary) if args.json else f"medians: {json.dumps(summary)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
