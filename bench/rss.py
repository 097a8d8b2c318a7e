"""Peak resident memory of a process tree, sampled from Linux /proc (standard library only,
so the peers' benchmarks in their own virtualenv use it too)."""

from __future__ import annotations

import os
import threading


class RssSampler:
    """Samples the resident memory of a process (`pid`, default this one) and its
    descendants (Linux /proc)."""

    def __init__(self, interval: float = 0.1, pid: int | None = None) -> None:
        self.interval = interval
        self.pid = os.getpid() if pid is None else pid
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
        self.peak_kb = max(self.peak_kb, _tree_rss_kb(self.pid))


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


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one live process (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of `root` and its live descendants."""
    return sum(cpu_seconds(pid) for pid in _descendants(root))


def postgres_cpu_seconds() -> float:
    """CPU seconds of every live `postgres` process of this machine (the server's backends)."""
    total = 0.0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/comm", encoding="ascii") as fh:
                if fh.read().strip() != "postgres":
                    continue
        except OSError:
            continue
        total += cpu_seconds(int(name))
    return total
