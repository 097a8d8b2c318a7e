"""How long `noetl` takes to start: the wall time of `noetl run examples/hello_world.yaml`
and of `noetl --help`, N runs each, median and minimum (and the CPU time of the process
and its children, steadier than the wall time on a busy machine).

    python bench/startup.py                      # this checkout, 15 runs of each
    python bench/startup.py -n 30
    python bench/startup.py --against ../old     # another checkout too, run alternately,
                                                 # and the ratio new / old

Each run is `python -m noetl ...` in a fresh process with the checkout first on
PYTHONPATH and the working directory a fresh temporary one (its own `.noetl` database, as a
first `noetl run` has; the playbook is copied there), with bytecode written and read as
for an installed package (PYTHONDONTWRITEBYTECODE is unset for them). The first run of
each checkout is a warm-up (bytecode compiled, files in the page cache) and is not
counted.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
CASES = {
    "run hello_world": ["run", "hello_world.yaml"],
    "--help": ["--help"],
}


@dataclass
class Samples:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(checkout: Path, args: list[str]) -> tuple[float, float]:
    """The wall and CPU seconds of one `python -m noetl ARGS` in a fresh directory."""
    with tempfile.TemporaryDirectory(prefix="noetl-startup-") as work:
        shutil.copy(checkout / "examples" / "hello_world.yaml", work)
        env = {**os.environ, "PYTHONPATH": str(checkout)}
        # As an installed package runs: from bytecode (pip compiles it; here the warm-up
        # run writes it), whatever this shell says.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cpu = _children_cpu()
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "noetl", *args],
            cwd=work,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{checkout}: noetl {' '.join(args)} failed:\n{done.stderr}")
        return wall, _children_cpu() - cpu


def measure(checkouts: list[Path], runs: int) -> dict[tuple[Path, str], Samples]:
    """Every case on every checkout, `runs` times, the checkouts alternating."""
    samples = {(c, case): Samples() for c in checkouts for case in CASES}
    for checkout in checkouts:  # warm-up
        for args in CASES.values():
            run_once(checkout, args)
    for _ in range(runs):
        for case, args in CASES.items():
            for checkout in checkouts:
                wall, cpu = run_once(checkout, args)
                samples[(checkout, case)].wall.append(wall)
                samples[(checkout, case)].cpu.append(cpu)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=15, help="runs of each case")
    parser.add_argument("--against", type=Path, help="another checkout to compare with")
    args = parser.parse_args()
    new = HERE
    checkouts = [new] if args.against is None else [new, args.against.resolve()]
    samples = measure(checkouts, args.runs)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.runs} runs each")
    print(f"{'case':<18} {'checkout':<40} {'median s':>9} {'min s':>7} {'cpu median s':>13}")
    for case in CASES:
        for checkout in checkouts:
            s = samples[(checkout, case)]
            print(
                f"{case:<18} {str(checkout)[-40:]:<40} {statistics.median(s.wall):>9.3f} "
                f"{min(s.wall):>7.3f} {statistics.median(s.cpu):>13.3f}"
            )
        if args.against is not None:
            mine, theirs = samples[(new, case)], samples[(checkouts[1], case)]
            ratio = statistics.median(mine.wall) / statistics.median(theirs.wall)
            ratio_min = min(mine.wall) / min(theirs.wall)
            print(f"{case:<18} {'ratio this / against':<40} {ratio:>9.2f} {ratio_min:>7.2f}")


if __name__ == "__main__":
    main()
