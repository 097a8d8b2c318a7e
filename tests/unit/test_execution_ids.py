"""Execution ids: time-ordered, and never the same twice in one process, however many
are made in one millisecond."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from noetl.decision.records import new_execution_id

NOW = 1_795_941_371.514


def test_ids_made_in_one_millisecond_all_differ() -> None:
    ids = [new_execution_id(NOW) for _ in range(200_000)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 19 and i.isdigit() and i.startswith("1795941371514") for i in ids)


def test_ids_made_by_many_threads_at_once_all_differ() -> None:
    with ThreadPoolExecutor(8) as pool:
        batches = list(pool.map(lambda _: [new_execution_id(NOW) for _ in range(5_000)], range(8)))
    ids = [i for batch in batches for i in batch]
    assert len(set(ids)) == len(ids)


def test_ids_follow_the_clock() -> None:
    assert new_execution_id(NOW) < new_execution_id(NOW + 0.001) < new_execution_id(NOW + 1)


def test_a_forked_child_does_not_repeat_its_parents_next_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, ",".join(new_execution_id(NOW) for _ in range(20)).encode())
        os._exit(0)
    os.close(write)
    theirs = set(os.read(read, 65536).decode().split(","))
    os.close(read)
    os.waitpid(pid, 0)
    ours = {new_execution_id(NOW) for _ in range(20)}
    assert len(theirs) == 20
    assert not ours & theirs


def test_other_processes_start_elsewhere() -> None:
    code = "from noetl.decision.records import new_execution_id as n; print(n(1.0))"
    lows = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()[-6:]
        for _ in range(3)
    }
    assert len(lows) == 3
