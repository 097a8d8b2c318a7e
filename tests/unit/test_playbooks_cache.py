"""The server's playbook cache (noetl.server.starts.Playbooks): kept by path and version,
bounded in entries and in text, least recently used out first."""

from __future__ import annotations

from noetl.server.starts import Playbooks
from noetl.store import MemoryStore


def catalog(*paths: str, size: int = 10) -> MemoryStore:
    store = MemoryStore()
    for path in paths:
        store.register_playbook(path, "p", "x" * size + path, now=1.0)
    return store


def test_a_kept_playbook_is_not_read_again() -> None:
    cache = Playbooks(catalog("a"))
    first = cache.get("a")
    assert first is not None and cache.get("a") is first
    assert cache.get("a", 1) == first  # a pinned version is its own entry
    assert cache.reads == 2


def test_the_least_recently_used_goes_first() -> None:
    cache = Playbooks(catalog("a", "b", "c"), entries=2)
    cache.get("a")
    cache.get("b")
    cache.get("a")  # b is now the least recently used
    cache.get("c")
    reads = cache.reads
    cache.get("a")
    assert cache.reads == reads
    cache.get("b")
    assert cache.reads == reads + 1


def test_texts_are_bounded_in_size() -> None:
    store = catalog("a", "b", size=60)
    store.register_playbook("big", "p", "y" * 500, now=1.0)
    cache = Playbooks(store, text_bytes=130)
    cache.get("big")
    cache.get("big")
    assert cache.reads == 2  # over the bound alone: never kept
    cache.get("a")
    cache.get("b")
    cache.get("a")  # both fit (61 + 61 <= 130)
    assert cache.reads == 4
    store.register_playbook("c", "p", "z" * 60, now=1.0)
    cache.get("c")  # the third does not fit: the least recently used (b) goes
    cache.get("a")
    assert cache.reads == 5
    cache.get("b")
    assert cache.reads == 6


def test_forget_reads_the_latest_again_and_keeps_pinned_versions() -> None:
    store = catalog("a")
    cache = Playbooks(store)
    cache.get("a")
    cache.get("a", 1)
    store.register_playbook("a", "p", "newer", now=2.0)
    cache.forget("a")
    latest = cache.get("a")
    assert latest is not None and latest.version == 2
    pinned = cache.get("a", 1)
    assert pinned is not None and pinned.version == 1
    assert cache.reads == 3


def test_an_unregistered_path_is_not_kept() -> None:
    store = MemoryStore()
    cache = Playbooks(store)
    assert cache.get("a") is None
    store.register_playbook("a", "p", "t", now=1.0)
    found = cache.get("a")
    assert found is not None and found.text == "t"
