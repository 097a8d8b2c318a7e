"""Canceling an execution stops its running python code, in the embedded runtime."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from noetl.core import EventType
from noetl.dsl.validate import load_playbook_text
from noetl.runtime.local import embedded_runtime

ITEMS = 10_000

LONG_LOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: long_loop}
workflow:
  - step: work
    loop:
      collection: "{{ workload.numbers }}"
      mode: parallel
      max_concurrency: 4
    tool:
      kind: python
      code: |
        import time
        def main(context, args):
            time.sleep(0.05)
            return args["x"]
      args: {x: "{{ item }}"}
"""


def test_cancel_stops_a_long_parallel_loop(tmp_path: Path) -> None:
    playbook = load_playbook_text(LONG_LOOP).require()
    with embedded_runtime(str(tmp_path / "db.sqlite"), workers=4) as runtime:
        execution_id = runtime.start(playbook, workload={"numbers": list(range(ITEMS))})
        canceled_at: list[float] = []

        def cancel_later() -> None:
            time.sleep(0.5)
            canceled_at.append(time.monotonic())
            runtime.cancel(execution_id)

        canceller = threading.Thread(target=cancel_later)
        canceller.start()
        (result,) = runtime.wait([execution_id])
        ended_at = time.monotonic()
        canceller.join()
        events = runtime.store.load_events(execution_id)

    assert result.status.value == "canceled"
    assert ended_at - canceled_at[0] < 2
    (cancel,) = [e for e in events if e.type == EventType.CANCEL_REQUESTED]
    started = [e for e in events if e.type == EventType.LOOP_ITERATION_STARTED]
    assert 0 < len(started) < ITEMS // 10
    assert all(e.seq < cancel.seq for e in started)
