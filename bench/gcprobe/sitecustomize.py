"""Where the collector's time goes in a benchmark's processes.

    PYTHONPATH=bench/gcprobe python bench/starts.py --n 3000 --json
    cat /tmp/noetl-gcprobe/*.txt

Python imports `sitecustomize` at start-up from the path: this one times every
collection (`gc.callbacks`) and, as each process exits, writes its command, its CPU
seconds and the collections' seconds and counts by generation to
`$NOETL_GCPROBE_DIR/<pid>.txt` (default /tmp/noetl-gcprobe).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import time
from typing import Any

_OUT = os.environ.get("NOETL_GCPROBE_DIR", "/tmp/noetl-gcprobe")
_started = [0.0]
_seconds = [0.0, 0.0, 0.0]
_counts = [0, 0, 0]


def _timed(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    generation = int(info["generation"])
    _seconds[generation] += time.perf_counter() - _started[0]
    _counts[generation] += 1


def _write() -> None:
    os.makedirs(_OUT, exist_ok=True)
    seconds = [round(s, 3) for s in _seconds]
    line = (
        f"{' '.join(sys.argv[1:4])} cpu_s={time.process_time():.2f} "
        f"gc_s={seconds} collections={_counts}\n"
    )
    with open(os.path.join(_OUT, f"{os.getpid()}.txt"), "w", encoding="utf-8") as out:
        out.write(line)


gc.callbacks.append(_timed)
atexit.register(_write)
