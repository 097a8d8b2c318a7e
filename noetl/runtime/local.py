"""Wiring of the embedded runtime: store, python process pool, tool registry."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from noetl.config.model import DEFAULT_DB
from noetl.engine.options import EngineOptions
from noetl.runtime.children import EmbeddedLauncher
from noetl.runtime.embedded import EmbeddedRuntime
from noetl.store import open_store
from noetl.worker.python_pool import PythonPool
from noetl.worker.secrets import default_provider
from noetl.worker.tools import default_registry

__all__ = ["DEFAULT_DB", "embedded_runtime"]


@contextmanager
def embedded_runtime(
    db: str = DEFAULT_DB,
    *,
    workers: int | None = None,
    secrets_file: str | None = None,
    options: EngineOptions | None = None,
) -> Iterator[EmbeddedRuntime]:
    """An embedded runtime over the database `db`; everything is closed on exit. Secrets
    come from the environment and the secrets file (`secrets_file`, else
    `NOETL_SECRETS_FILE`). `options`: the engine's defaults (the configuration's, see
    `noetl.config.Settings.engine_options`; None: the engine's own)."""
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
                options=options,
            )
            launcher.bind(runtime)
            try:
                yield runtime
            finally:
                runtime.close()
    finally:
        store.close()
