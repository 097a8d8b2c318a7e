"""Benchmarks of NoETL through its public entry points.

    python bench/run.py --workload chain --mode embedded --json
    python bench/run.py --workload fanout --mode embedded --n 10000 --json

Prints one JSON object: workload, mode, workers, n, wall_s, per_step_ms, items_per_s,
peak_rss_mb (fields that do not apply are null). Wall time runs from the call that starts
the execution to its terminal status; peak RSS is sampled over this process and all of its
descendants (the python tool's child processes included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from noetl.dsl import load_playbook_text
from noetl.runtime.local import embedded_runtime

ADD_ONE = "def main(context, args):\n    return args['v'] + 1\n"
DOUBLE = "def main(context, args):\n    return args['x'] * 2\n"


def chain_playbook(n: int) -> str:
    """W1: n sequential python steps, each adding 1 to the previous step's result."""
    lines = [
        "apiVersion: noetl.io/v2",
        "kind: Playbook",
        "metadata: {name: bench_chain}",
        "workflow:",
    ]
    for i in range(n):
        prev = "0" if i == 0 else '"{{ v }}"'
        lines += [
            f"  - step: s{i}",
            "    tool:",
            "      kind: python",
            f"      code: {json.dumps(ADD_ONE)}",
            f"      args: {{v: {prev}}}",
            "    result: {as: v}",
        ]
        if i + 1 < n:
            lines.append(f"    next: s{i + 1}")
    return "\n".join(lines) + "\n"


def fanout_playbook(n: int, concurrency: int = 64) -> str:
    """W2: an n-item parallel loop of trivial python items, results collected into a list."""
    return f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: bench_fanout}}
workload: {{n: {n}}}
workflow:
  - step: fan
    loop:
      collection: "{{{{ range(workload.n) | list }}}}"
      element: x
      mode: parallel
      max_concurrency: {concurrency}
    tool:
      kind: python
      code: {json.dumps(DOUBLE)}
      args: {{x: "{{{{ x }}}}"}}
    result:
      collect: {{into: doubled, mode: list}}
"""


class RssSampler:
    """Samples the resident memory of this process and its descendants (Linux /proc)."""

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


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it, from /proc/<pid>/task/<tid>/children."""
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


_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def run_embedded(workload: str, n: int, workers: int | None) -> dict[str, Any]:
    text = chain_playbook(n) if workload == "chain" else fanout_playbook(n)
    playbook = load_playbook_text(text, f"bench_{workload}.yaml").require()
    with tempfile.TemporaryDirectory() as tmp, RssSampler() as rss:
        db = str(Path(tmp) / "bench.db")
        with embedded_runtime(db, workers=workers) as runtime:
            # Warm the python pool so the figure is the orchestration cost, not process start.
            warm = load_playbook_text(chain_playbook(2), "warm.yaml").require()
            runtime.run(warm)
            started = time.perf_counter()
            result = runtime.run(playbook, source_text=text)
            wall = time.perf_counter() - started
    if result.status.value != "ok":
        raise SystemExit(f"benchmark execution failed: {result.to_dict()}")
    if workload == "chain" and result.context.get("v") != n:
        raise SystemExit(f"chain computed {result.context.get('v')}, expected {n}")
    if workload == "fanout" and len(result.context.get("doubled", [])) != n:
        raise SystemExit("fanout collected the wrong number of items")
    return {
        "workload": workload,
        "mode": "embedded",
        "workers": workers or os.cpu_count(),
        "n": n,
        "wall_s": round(wall, 4),
        "per_step_ms": round(wall * 1000 / n, 4) if workload == "chain" else None,
        "items_per_s": round(n / wall, 1) if workload == "fanout" else None,
        "peak_rss_mb": round(rss.peak_kb / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=["chain", "fanout"], required=True)
    parser.add_argument("--mode", choices=["embedded"], default="embedded")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--n", type=int, default=None, help="steps (chain) or items (fanout)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    n = args.n or (1000 if args.workload == "chain" else 10000)
    figures = run_embedded(args.workload, n, args.workers)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>12}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
