"""Wiring of the embedded runtime: store, python process pool, tool registry."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from noetl.runtime.children import EmbeddedLauncher
from noetl.runtime.embedded import EmbeddedRuntime
from noetl.store import open_store
from noetl.worker.python_pool import PythonPool
from noetl.worker.secrets import default_provider
from noetl.worker.tools import default_registry

DEFAULT_DB = os.path.join(".noetl", "noetl.db")


@contextmanager
def embedded_runtime(
    db: str = DEFAULT_DB, *, workers: int | None = None, secrets_file: str | None = None
) -> Iterator[EmbeddedRuntime]:
    """An embedded runtime over the database `db`; everything is closed on exit. Secrets
    come from the environment and the secrets file (`secrets_file`, else
    `NOETL_SECRETS_FILE`)."""
    count = workers or os.cpu_count() or 2
    provider = default_provider(secrets_file)
    store = open_store(db)
    try:
        with PythonPool(processes=count) as pool:
            launcher = EmbeddedLauncher()  # child executions run in this same runtime
            runtime = EmbeddedRuntime(
                store,
                default_registry(pool, secrets=provider, launcher=launcher),
                workers=count,
            )
            launcher.bind(runtime)
            try:
                yield runtime
            finally:
                runtime.close()
    finally:
        store.close()
