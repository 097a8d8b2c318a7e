"""How many tasks a worker runs at once, and how many python processes run them, when the
configuration does not say: chosen from the machine (its cores and memory).

A worker's slots mostly wait (on the database, on a python child, on a tool's I/O), so it
needs many more slots than cores: with few slots, claims and reports stop coming in
batches and every task pays a round trip of its own (on 2 cores, a 5,000-item loop ran
at 130 items/s with 2 slots, 560 with 16, 750 with 32, no more with 64). Python children
do the CPU work. A child is also held from a chained step's early start until its chain
takes the reply, and a chain that finds no child free at once commits early or waits: 4
per core ran 3,000 five-step executions on 2 cores 9 to 21 % faster than 2 per core
(4 pairs), a 10,000-item loop no slower. Memory bounds both: a python child costs tens
of megabytes, a slot (a thread, now and then a database connection) far less.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

SLOTS_PER_CORE = 16
PROCESSES_PER_CORE = 4
MIN_SLOTS = 8
# Each slot may hold a database connection (a worker's pool is its slots plus 4): a
# default that keeps a server and two workers under PostgreSQL's max_connections (100 by
# default). More slots did not help on 2 cores (64 ran as 32).
MAX_SLOTS = 32
MIN_PROCESSES = 2
# Memory set aside per python child and per slot, under the machine's memory.
PROCESS_BYTES = 256 << 20
SLOT_BYTES = 32 << 20


@dataclass(frozen=True, slots=True)
class Machine:
    """What sizing looks at: usable cores and physical memory (None: unknown)."""

    cores: int
    memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class Sizing:
    """A worker's task slots and python child processes."""

    concurrency: int
    python_processes: int


def this_machine() -> Machine:
    """The cores this process may run on and the machine's physical memory."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        memory: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        memory = None
    return Machine(cores=max(cores, 1), memory_bytes=memory)


def size_worker(
    machine: Machine, *, concurrency: int | None = None, python_processes: int | None = None
) -> Sizing:
    """The slots and python processes of a worker on `machine`; values given by the
    configuration are kept as they are (python processes never above the slots). Slots
    given without python processes get as many python processes: a worker asked to run N
    tasks at once runs N python tasks at once."""
    slots = concurrency
    if slots is None:
        slots = min(max(SLOTS_PER_CORE * machine.cores, MIN_SLOTS), MAX_SLOTS)
        if machine.memory_bytes is not None:
            slots = min(slots, max(machine.memory_bytes // SLOT_BYTES, 1))
    processes = python_processes
    if processes is None and concurrency is not None:
        processes = concurrency  # as many tasks at once as asked for, python ones too
    if processes is None:
        processes = max(PROCESSES_PER_CORE * machine.cores, MIN_PROCESSES)
        if machine.memory_bytes is not None:
            processes = min(processes, max(machine.memory_bytes // PROCESS_BYTES, 1))
    return Sizing(concurrency=slots, python_processes=min(processes, slots))
