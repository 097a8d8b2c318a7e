"""The credential store (`store.credentials`) of every Store adapter: ciphertext in, the
same ciphertext out, by name."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from noetl.credentials.keys import Keyring, new_key
from noetl.credentials.records import parse_credential
from noetl.credentials.store import (
    DatabaseCredentials,
    StoredCredential,
    rotate_all,
    save_credential,
)
from noetl.store.base import Store

T0 = 1_700_000_000.0


def row(name: str = "pg", **changes: object) -> StoredCredential:
    base = StoredCredential(
        name=name,
        type="postgres",
        ciphertext=f"gAAAA-{name}-1",
        key_id="0123456789ab",
        created_at=T0,
        updated_at=T0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_credential_is_stored_and_read_back_by_name(store: Store) -> None:
    assert store.credentials.get("pg") is None
    assert store.credentials.put(row()) is True
    assert store.credentials.get("pg") == row()
    assert store.credentials.get("other") is None


def test_put_replaces_a_credential_and_keeps_its_creation_time(store: Store) -> None:
    store.credentials.put(row())
    newer = row(type="bearer", ciphertext="gAAAA-2", key_id="ba9876543210", created_at=T0 + 9)
    assert store.credentials.put(replace(newer, updated_at=T0 + 9)) is False
    assert store.credentials.get("pg") == replace(newer, created_at=T0, updated_at=T0 + 9)
    assert len(store.credentials.all()) == 1


def test_all_lists_credentials_by_name(store: Store) -> None:
    for name in ("web", "Api", "pg_local", "a.b-c"):
        store.credentials.put(row(name))
    assert [r.name for r in store.credentials.all()] == ["Api", "a.b-c", "pg_local", "web"]


def test_delete_removes_a_credential_once(store: Store) -> None:
    store.credentials.put(row())
    store.credentials.put(row("kept"))
    assert store.credentials.delete("pg") is True
    assert store.credentials.delete("pg") is False
    assert store.credentials.get("pg") is None
    assert [r.name for r in store.credentials.all()] == ["kept"]


def test_reencrypt_replaces_only_the_ciphertext_it_expects(store: Store) -> None:
    store.credentials.put(row())
    assert store.credentials.reencrypt("pg", "gAAAA-pg-1", "gAAAA-rotated", "ffffffffffff")
    assert store.credentials.get("pg") == row(ciphertext="gAAAA-rotated", key_id="ffffffffffff")
    # a value set in between wins: the stale rotation changes nothing
    assert not store.credentials.reencrypt("pg", "gAAAA-pg-1", "gAAAA-stale", "000000000000")
    assert not store.credentials.reencrypt("none", "x", "y", "z")
    assert store.credentials.get("pg") == row(ciphertext="gAAAA-rotated", key_id="ffffffffffff")


def test_values_are_encrypted_end_to_end(store: Store) -> None:
    old, new = new_key(), new_key()
    record = {"type": "bearer", "data": {"token": "tok-canary-42"}}
    save_credential(store.credentials, Keyring([old]), parse_credential("api", record), T0)
    stored = store.credentials.get("api")
    assert stored is not None and "tok-canary-42" not in stored.ciphertext
    assert rotate_all(store.credentials, Keyring([new, old])).rotated == ("api",)
    assert DatabaseCredentials(store.credentials, Keyring([new])).credential("api") == record


def test_puts_of_one_new_name_at_once_call_exactly_one_of_them_new(store: Store) -> None:
    barrier = threading.Barrier(4)

    def put(index: int) -> bool:
        barrier.wait()
        return store.credentials.put(row("race", ciphertext=f"gAAAA-race-{index}"))

    with ThreadPoolExecutor(4) as pool:
        created = list(pool.map(put, range(4)))
    assert created.count(True) == 1
