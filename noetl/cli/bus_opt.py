"""`--bus` of `noetl server start` and `noetl worker start`: the store with its task bus."""

from __future__ import annotations

import click

from noetl.bus import TaskBus, attach_bus
from noetl.cli.settings import setting_option
from noetl.config import Settings
from noetl.store import Store, open_store

__all__ = ["bus_option", "close_store", "open_store_with_bus"]

bus_option = setting_option(
    "bus.url",
    "--bus",
    help="NATS JetStream server (nats://HOST:PORT) on which queued tasks are announced, so "
    "idle workers wake at once; the database stays the source of truth (unset: database "
    "wake-ups).",
)


def open_store_with_bus(
    settings: Settings, *, connections: int | None = None
) -> tuple[Store, TaskBus | None]:
    """The store of `settings.db`, announcing on the bus of `settings.bus` when one is set."""
    store = (
        open_store(settings.db.url)
        if connections is None
        else (open_store(settings.db.url, connections=connections))
    )
    try:
        bus = attach_bus(store, settings.bus.url)
    except BaseException:
        store.close()
        raise
    if bus is not None:
        click.echo(f"task bus: {settings.bus.url}", err=True)
    return store, bus


def close_store(store: Store, bus: TaskBus | None) -> None:
    if bus is not None:
        bus.close()
    store.close()
