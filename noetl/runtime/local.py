"""Wiring of the embedded runtime: store, python process pool, tool registry."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from noetl.observability import observer_for
from noetl.runtime.children import EmbeddedLauncher
from noetl.runtime.embedded import EmbeddedRuntime
from noetl.store import open_store
from noetl.worker.python_pool import PythonPool
from noetl.worker.secrets import default_provider
from noetl.worker.tools import default_registry

if TYPE_CHECKING:
    from noetl.observability.metrics import Metrics

DEFAULT_DB = os.path.join(".noetl", "noetl.db")
# The `pool` label of the embedded runtime's worker metrics.
LOCAL_POOL = "local"


@contextmanager
def embedded_runtime(
    db: str = DEFAULT_DB,
    *,
    workers: int | None = None,
    secrets_file: str | None = None,
    metrics: Metrics | None = None,
    log_events: bool = False,
) -> Iterator[EmbeddedRuntime]:
    """An embedded runtime over the database `db`; everything is closed on exit. Secrets
    come from the environment and the secrets file (`secrets_file`, else
    `NOETL_SECRETS_FILE`). `metrics` records its metrics (and the store's state gauges);
    `log_events` writes seed 000's log events (see noetl.observability)."""
    count = workers or os.cpu_count() or 2
    provider = default_provider(secrets_file)
    store = open_store(db)
    observer = observer_for(metrics=metrics, logs=log_events, pool=LOCAL_POOL)
    if metrics is not None:
        from noetl.observability.store_gauges import StoreGauges  # noqa: PLC0415

        metrics.registry.register(StoreGauges(store))
    try:
        with PythonPool(processes=count) as pool:
            launcher = EmbeddedLauncher()  # child executions run in this same runtime
            runtime = EmbeddedRuntime(
                store,
                default_registry(pool, secrets=provider, launcher=launcher, observer=observer),
                workers=count,
                observer=observer,
            )
            launcher.bind(runtime)
            try:
                yield runtime
            finally:
                runtime.close()
    finally:
        store.close()
