"""Encrypted credentials (`store.credentials`) in memory (SQLite and PostgreSQL:
`noetl.store.managers.credentials`). The rows hold
ciphertext only: encrypting and decrypting happen above the store (noetl.credentials)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from noetl.credentials.store import StoredCredential

Use = Callable[[], AbstractContextManager[sqlite3.Connection]]


def credential_from_row(row: tuple[Any, ...]) -> StoredCredential:
    return StoredCredential(
        name=row[0],
        type=row[1],
        ciphertext=row[2],
        key_id=row[3],
        created_at=float(row[4]),
        updated_at=float(row[5]),
    )


class MemoryCredentials:
    """`CredentialStore` in a dict."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._rows: dict[str, StoredCredential] = {}

    def put(self, credential: StoredCredential) -> bool:
        with self._lock:
            old = self._rows.get(credential.name)
            if old is not None:
                credential = replace(credential, created_at=old.created_at)
            self._rows[credential.name] = credential
            return old is None

    def get(self, name: str) -> StoredCredential | None:
        with self._lock:
            return self._rows.get(name)

    def all(self) -> list[StoredCredential]:
        with self._lock:
            return [self._rows[name] for name in sorted(self._rows)]

    def delete(self, name: str) -> bool:
        with self._lock:
            return self._rows.pop(name, None) is not None

    def reencrypt(self, name: str, expected: str, ciphertext: str, key_id: str) -> bool:
        with self._lock:
            old = self._rows.get(name)
            if old is None or old.ciphertext != expected:
                return False
            self._rows[name] = replace(old, ciphertext=ciphertext, key_id=key_id)
            return True
