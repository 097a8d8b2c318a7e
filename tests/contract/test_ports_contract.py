"""The role ports: `Store` is exactly their union, and every adapter has every member."""

from __future__ import annotations

from noetl.store import ports
from noetl.store.base import Store

ROLES = (
    ports.LeasePort,
    ports.WorkerRegistryPort,
    ports.ExecutionPort,
    ports.InboxPort,
    ports.DeadLetterPort,
    ports.CatalogPort,
    ports.AdminPort,
    ports.RetentionPort,
)


def _members(port: type) -> set[str]:
    return {
        name
        for klass in port.__mro__
        if klass.__module__ == ports.__name__
        for name in vars(klass)
        if not name.startswith("_")
    }


def test_store_is_the_union_of_the_role_ports() -> None:
    union = set().union(*(_members(port) for port in ROLES))
    assert _members(Store) == union | {"close"}


def test_the_worker_port_is_only_what_a_worker_runs_tasks_with() -> None:
    assert _members(ports.LeasePort) == {
        "claim",
        "heartbeat",
        "complete",
        "complete_many",
        "release",
        "wait_for",
    }


def test_every_adapter_has_every_member(store: Store) -> None:
    missing = sorted(name for name in _members(Store) if not hasattr(store, name))
    assert missing == []
