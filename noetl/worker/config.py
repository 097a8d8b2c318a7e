"""A worker's settings (`WorkerConfig`), its counts (`WorkerStats`) and its default id."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

__all__ = ["WorkerConfig", "WorkerStats", "default_worker_id"]


def default_worker_id(pool: str) -> str:
    """host:pid:pool: unique per worker process and pool."""
    return f"{socket.gethostname()}:{os.getpid()}:{pool}"


@dataclass
class WorkerConfig:
    """How a worker runs: its pool, task slots, lease, heartbeat and poll interval."""

    pool: str = "default"
    concurrency: int = 2
    lease_s: float = 30.0
    heartbeat_s: float | None = None  # default: a third of the lease
    poll_s: float = 0.5
    worker_id: str = ""
    # Steps a continuation may run past its task before it commits, and for how long
    # (`noetl.worker.chain`); 0 steps: none.
    chain_steps: int = 8
    chain_ms: float = 25.0

    def heartbeat_interval(self) -> float:
        return self.heartbeat_s if self.heartbeat_s is not None else self.lease_s / 3


@dataclass
class WorkerStats:
    """What a worker did, counted as it runs."""

    completed: int = 0
    continued: int = 0  # outcomes decided here (the continuation path)
    rejected: int = 0
    lost: int = 0
    released: int = 0  # handed back to the queue by a hard stop
    errors: list[str] = field(default_factory=list)
    # Why the worker stopped on its own (a thread it needs could not be started again).
    failure: str | None = None
