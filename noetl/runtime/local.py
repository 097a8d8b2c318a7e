"""Wiring of the embedded runtime: store, python process pool, tool registry."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from noetl.runtime.embedded import EmbeddedRuntime
from noetl.store import open_store
from noetl.worker.python_pool import PythonPool
from noetl.worker.tools import default_registry

DEFAULT_DB = os.path.join(".noetl", "noetl.db")


@contextmanager
def embedded_runtime(
    db: str = DEFAULT_DB, *, workers: int | None = None
) -> Iterator[EmbeddedRuntime]:
    """An embedded runtime over the database `db`; everything is closed on exit."""
    count = workers or os.cpu_count() or 2
    store = open_store(db)
    try:
        with PythonPool(processes=count) as pool:
            runtime = EmbeddedRuntime(store, default_registry(pool), workers=count)
            try:
                yield runtime
            finally:
                runtime.close()
    finally:
        store.close()
