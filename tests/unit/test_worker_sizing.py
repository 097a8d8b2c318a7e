"""A worker's default slots and python processes, chosen from the machine."""

from __future__ import annotations

import pytest

from noetl.worker.sizing import Machine, Sizing, size_worker, this_machine

GB = 1 << 30


@pytest.mark.parametrize(
    ("cores", "expected"),
    [
        (1, Sizing(concurrency=16, python_processes=4)),
        (2, Sizing(concurrency=32, python_processes=8)),
        (4, Sizing(concurrency=32, python_processes=16)),
        (32, Sizing(concurrency=32, python_processes=32)),
    ],
)
def test_slots_and_processes_grow_with_the_cores(cores: int, expected: Sizing) -> None:
    assert size_worker(Machine(cores=cores, memory_bytes=64 * GB)) == expected


def test_little_memory_bounds_both() -> None:
    # 512 MB: two python children of 256 MB, sixteen slots of 32 MB.
    assert size_worker(Machine(cores=8, memory_bytes=512 << 20)) == Sizing(16, 2)
    assert size_worker(Machine(cores=8, memory_bytes=64 << 20)) == Sizing(2, 1)


def test_unknown_memory_sizes_by_the_cores_alone() -> None:
    assert size_worker(Machine(cores=2, memory_bytes=None)) == Sizing(32, 8)


def test_configured_values_are_kept_and_processes_stay_within_the_slots() -> None:
    machine = Machine(cores=2, memory_bytes=8 * GB)

    assert size_worker(machine, concurrency=2) == Sizing(2, 2)
    assert size_worker(machine, python_processes=1) == Sizing(32, 1)
    assert size_worker(machine, concurrency=300, python_processes=3) == Sizing(300, 3)
    # slots asked for without processes: that many python tasks at once too
    assert size_worker(machine, concurrency=6) == Sizing(6, 6)


def test_this_machine_has_a_core_and_some_memory() -> None:
    machine = this_machine()

    assert machine.cores >= 1
    assert machine.memory_bytes is None or machine.memory_bytes > 0
